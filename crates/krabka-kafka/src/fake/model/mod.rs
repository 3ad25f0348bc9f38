//! A modelled Kafka cluster, for the simulation tier: the freedoms Kafka
//! takes, not what the client expects of it. Each broker *process* answers
//! the protocol (`answers`) from what it knows: the controller's metadata
//! records it applied, and the prefix of each partition's log it copied.
//! The model keeps the truth beside it: every pair each role held, when,
//! and every record a committed reader may see of the coordination topic,
//! and since when.
//!
//! What it allows, each as Kafka's source has it:
//! - **A process is not its node id.** A node's process can be killed and
//!   started again, or a second process registered with the node id of one
//!   the controller fenced while that one still runs and answers on the
//!   connections it has (`ClusterControlManager.registerBroker` refuses a
//!   second incarnation only while the first one's session is valid). New
//!   connections to the node's address reach the newest process.
//! - **Stale memory.** A process cut off from the controller, or paused
//!   (SIGSTOP, a long GC pause), applies no metadata record and copies no
//!   log while it is: it answers from what it knew, naming itself the leader
//!   (and coordinator) of what it led. A paused one catches up some time
//!   after it runs again (`BrokerMetadataListener`); a cut one is fenced
//!   after the session timeout (`BrokerHeartbeatManager`) and its
//!   leaderships move, each at a new leader epoch (`PartitionChangeBuilder`),
//!   to a replica that holds the whole log (the ISR).
//! - **Only the leader writes.** A pair is minted, and a record appended, at
//!   the process the controller names leader (at the current epoch), while it
//!   runs, has loaded the partition and its disk is not stalled; the
//!   partition's followers that follow the controller copy it at once.
//! - **Replicas, ISR and ELR.** A cluster may have more brokers than the
//!   replication factor: each partition lives on RF of them (a broker
//!   holding no replica copies nothing of it), its leader elected among its
//!   ISR. Writes to `__transaction_state` are `acks=all` and refused below
//!   its `min.insync.replicas` (`Partition.appendRecordsToLeader`:
//!   NOT_ENOUGH_REPLICAS, which InitProducerId and EndTxn answer as
//!   COORDINATOR_NOT_AVAILABLE, `TransactionStateManager
//!   .appendTransactionToLog`), and while an ISR member copies nothing
//!   (Kafka holds such an append until that member is dropped; the model
//!   refuses it, see `State::writer`). The controller drops a broker from every
//!   ISR when it fences it (`ReplicationControlManager.handleBrokerFenced`),
//!   and the leader adds a caught-up, unfenced follower back
//!   (`Partition.maybeExpandIsr`, `isReplicaIsrEligible`); below min.isr
//!   the dropped ones are eligible leaders (ELR, KIP-966, on by default
//!   since Kafka 4.1: `PartitionChangeBuilder.maybePopulateTargetElr`).
//! - **Producer ids from per-broker blocks.** Each process draws its
//!   producer ids from a block of 1000 the controller hands it when it
//!   first needs one (`ProducerIdControlManager`, `ProducerIdsBlock`), so
//!   the id a role gets next depends on which broker coordinates it then:
//!   lower as often as higher.
//! - **Transactional ids.** InitProducerId bumps the epoch, and rotates to
//!   a fresh producer id once it is exhausted (`TransactionMetadata
//!   .prepareProducerIdRotation`, `isProducerEpochExhausted`: 32,766); a
//!   transaction-version-2 commit bumps it too (KIP-890); an id unused for
//!   `transactional.id.expiration.ms` expires (a tombstone,
//!   `TransactionStateManager.removeExpiredTransactionalIds`), and the next
//!   InitProducerId starts anew; a transaction left open past its timeout is
//!   aborted by the coordinator with an epoch bump
//!   (`TransactionCoordinator.abortTimedOutTransactions`).
//! - **The coordination topic.** Records written in transactions, committed,
//!   aborted or left open by a member that crashed; a reader sees up to the
//!   last stable offset (`topic`); compaction removes superseded records.
//! - **Another cluster behind the same addresses** ([`Model::replace_cluster`]):
//!   a new cluster id, empty logs, producer id blocks from 0 again.

mod answers;
pub mod hashing;
mod topic;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

pub use topic::Visible;

use super::{Gate, Script};
use krabka_coordination::sync::lock;

/// Kafka's `isProducerEpochExhausted`: an epoch this high is rotated away
/// from at the next InitProducerId (`Short.MaxValue - 1`).
pub const EXHAUSTED_EPOCH: i16 = i16::MAX - 1;

/// The replicas of `part` among `nodes` at replication factor `rf`, the
/// preferred leader first: `rf` consecutive nodes (Kafka's
/// `StripedReplicaPlacer` places them round-robin too, from a random
/// start; here from the partition's index, so a schedule drawn before any
/// model knows them).
pub fn replicas_of(part: Part, nodes: &[i32], rf: usize) -> Vec<i32> {
    let start = match part {
        Part::Txn(p) => p as usize,
        Part::Topic(p) => p as usize + 1,
    };
    (0..rf.clamp(1, nodes.len().max(1)))
        .filter_map(|k| nodes.get((start + k) % nodes.len().max(1)).copied())
        .collect()
}

/// The partition of `__transaction_state` of `transactional_id` among
/// `partitions` (`TransactionStateManager.partitionFor`): a schedule drawn
/// before any model aims its faults at a role's coordinator with it.
pub fn txn_partition_of(transactional_id: &str, partitions: i32) -> i32 {
    hashing::txn_partition(transactional_id, partitions)
}

/// A partition of `__transaction_state` or of the coordination topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    /// `__transaction_state`-n.
    Txn(i32),
    /// The coordination topic's partition n.
    Topic(i32),
}

/// The cluster's shape and timings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Node ids and the `host:port` each advertises.
    pub brokers: Vec<(i32, String)>,
    /// Partitions of `__transaction_state`.
    pub txn_partitions: i32,
    /// The replication factor of both topics ([`replicas_of`]).
    pub replication_factor: usize,
    /// `__transaction_state`'s `min.insync.replicas`
    /// (`transaction.state.log.min.isr`, 2 by default).
    pub min_isr: i32,
    /// The coordination topic's: the broker's `min.insync.replicas` (1 by
    /// default; the service creates the topic without one).
    pub topic_min_isr: i32,
    /// Nodes of `brokers` that start only when [`Model::join`] starts them:
    /// a cluster grown from fewer brokers. Partitions stay on the replicas
    /// they were created on.
    pub later: Vec<i32>,
    /// The coordination topic and its partition count.
    pub topic: String,
    /// Its partitions.
    pub topic_partitions: i32,
    /// `broker.session.timeout.ms`: a broker that stops heartbeating is
    /// fenced after it.
    pub session_timeout: Duration,
    /// `broker.heartbeat.interval.ms`: a fenced broker that heartbeats
    /// again is unfenced after it.
    pub heartbeat: Duration,
    /// How long a new coordinator loads a `__transaction_state` partition
    /// (COORDINATOR_LOAD_IN_PROGRESS meanwhile).
    pub load: Duration,
    /// The members' transaction timeout: an open transaction older than
    /// this is aborted by the coordinator.
    pub transaction_timeout: Duration,
    /// The topic's `min.compaction.lag.ms`: a record stays at least this
    /// long after it became visible before compaction may remove it.
    pub min_compaction_lag: Duration,
}

/// A pair a role held from `at` on (`None`: no holder: expired, or never
/// initialised), in cluster `cluster`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// When it became current.
    pub at: Duration,
    /// The cluster's id.
    pub cluster: String,
    /// The role.
    pub role: String,
    /// The pair, or none.
    pub pair: Option<(i64, i16)>,
}

/// A partition of the coordination topic as it stood in one cluster: the
/// records a committed reader may see, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicTruth {
    /// The cluster's id.
    pub cluster: String,
    /// The partition.
    pub partition: i32,
    /// Its visible records, in the order they became visible.
    pub visible: Vec<Visible>,
}

/// A process answering from a view behind the controller's ([`Model::behind`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Behind {
    /// Its node id.
    pub node: i32,
    /// New connections to the node reach it (it was not replaced).
    pub reached: bool,
    /// The roles it names itself coordinator of, with the pair it describes.
    pub named: Vec<(String, (i64, i16))>,
}

/// What the model knows happened, for the checker.
#[derive(Clone, Debug, Default)]
pub struct Truth {
    /// Every pair every role held, in order.
    pub held: Vec<Held>,
    /// Every partition of every cluster so far.
    pub topics: Vec<TopicTruth>,
    /// When each cluster began to answer (its id).
    pub clusters: Vec<(Duration, String)>,
}

/// A controller metadata record (`__cluster_metadata`), as much as the
/// client sees of them.
#[derive(Clone, Debug)]
enum Meta {
    /// A process registered with its node id, fenced until it heartbeats.
    Register {
        node: i32,
        process: usize,
    },
    Fence {
        node: i32,
        process: usize,
    },
    Unfence {
        node: i32,
        process: usize,
    },
    /// A partition's leader (-1: none) at a leader epoch, its ISR and its
    /// eligible leader replicas.
    Leader {
        part: Part,
        leader: i32,
        epoch: i32,
        isr: Vec<i32>,
        elr: Vec<i32>,
    },
}

/// A registered node in a view: its process and whether it is fenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Registration {
    process: usize,
    fenced: bool,
}

/// A partition's leadership in a view.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Leadership {
    leader: i32,
    epoch: i32,
    isr: Vec<i32>,
    elr: Vec<i32>,
}

/// The fold of a prefix of the metadata log: what a process knows.
#[derive(Clone, Debug, Default)]
struct View {
    applied: usize,
    brokers: BTreeMap<i32, Registration>,
    leaders: BTreeMap<Part, Leadership>,
}

impl View {
    fn advance(&mut self, log: &[Meta]) {
        for record in &log[self.applied..] {
            match record {
                Meta::Register { node, process } => {
                    self.brokers.insert(
                        *node,
                        Registration {
                            process: *process,
                            fenced: true,
                        },
                    );
                }
                Meta::Fence { node, process } | Meta::Unfence { node, process } => {
                    if let Some(r) = self.brokers.get_mut(node).filter(|r| r.process == *process) {
                        r.fenced = matches!(record, Meta::Fence { .. });
                    }
                }
                Meta::Leader {
                    part,
                    leader,
                    epoch,
                    isr,
                    elr,
                } => {
                    self.leaders.insert(
                        *part,
                        Leadership {
                            leader: *leader,
                            epoch: *epoch,
                            isr: isr.clone(),
                            elr: elr.clone(),
                        },
                    );
                }
            }
        }
        self.applied = log.len();
    }

    fn leader(&self, part: Part) -> Option<&Leadership> {
        self.leaders.get(&part)
    }
}

/// How a process is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    /// Started; registers once the controller lets it.
    Starting,
    Running,
    /// Killed, or shut down.
    Dead,
}

/// One broker process (an incarnation of a node id).
#[derive(Clone, Debug)]
struct Process {
    node: i32,
    life: Life,
    /// SIGSTOPped: answers nothing, applies nothing, heartbeats not.
    paused: bool,
    /// Its disk stalled: answers nothing and writes nothing, but
    /// heartbeats (they need no disk).
    stalled: bool,
    /// Cut off from the controller: applies nothing, heartbeats not, but
    /// answers clients.
    cut: bool,
    /// After a pause: applies nothing until then.
    catch_up_at: Option<Duration>,
    view: View,
    /// Per partition, the length of the log prefix it holds.
    known: BTreeMap<Part, usize>,
    /// Per partition it leads in its view: the leader epoch, and when it
    /// has loaded it (a new coordinator loads its partition first).
    leading: BTreeMap<Part, (i32, Duration)>,
    /// Its producer id block: the next id and the end.
    block: Option<(i64, i64)>,
    last_heartbeat: Duration,
    fenced_at: Duration,
}

impl Process {
    /// A process of `node` with an empty log, started at `now`.
    fn new(node: i32, life: Life, now: Duration) -> Process {
        Process {
            node,
            life,
            paused: false,
            stalled: false,
            cut: false,
            catch_up_at: None,
            view: View::default(),
            known: BTreeMap::new(),
            leading: BTreeMap::new(),
            block: None,
            last_heartbeat: now,
            fenced_at: now,
        }
    }

    /// Its heartbeats reach the controller (the controller may not be
    /// there to take them).
    fn heartbeats(&self) -> bool {
        self.life == Life::Running && !self.paused && !self.cut
    }

    fn follows_controller(&self) -> bool {
        self.life == Life::Running && !self.paused && !self.cut && self.catch_up_at.is_none()
    }

    fn replicates(&self) -> bool {
        self.follows_controller() && !self.stalled
    }

    fn answers(&self) -> bool {
        self.life == Life::Running && !self.paused && !self.stalled
    }
}

/// One cluster's data: its id, logs and producer id counter.
#[derive(Debug)]
struct Data {
    cluster: String,
    txn: BTreeMap<i32, Vec<TxnEntry>>,
    topic: BTreeMap<i32, topic::Log>,
    next_block: i64,
}

/// A record of `__transaction_state`: a role's pair and transaction state,
/// or its tombstone.
#[derive(Clone, Debug)]
struct TxnEntry {
    role: String,
    value: Option<TxnValue>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TxnValue {
    pid: i64,
    epoch: i16,
    state: &'static str,
}

#[derive(Debug)]
struct State {
    settings: Settings,
    generation: u32,
    data: Data,
    meta: Vec<Meta>,
    controller: View,
    /// No active controller at work: the one there is SIGSTOPped, or a
    /// failover is under way. Nothing is registered, fenced, unfenced or
    /// elected and no metadata is fetched meanwhile; clients, the
    /// partitions' leaders and their followers go on.
    controller_silent: bool,
    /// The nodes started so far (the settings' brokers but those that join
    /// later), and each partition's replicas, assigned among them when the
    /// cluster was formatted.
    members: Vec<i32>,
    assignment: BTreeMap<Part, Vec<i32>>,
    processes: Vec<Process>,
    /// Per node, the process new connections reach.
    current: BTreeMap<i32, usize>,
    truth: Truth,
    /// Roles whose transactions are kept open by a crashed member (their
    /// producer ids), so timeouts can abort them.
    dirty: bool,
}

/// A modelled cluster, shared by its broker hosts and the run that drives
/// it.
pub struct Model {
    state: Mutex<State>,
    /// Bumped at every change the answering processes may wait for.
    changed: tokio::sync::watch::Sender<u64>,
    /// The simulated time inside a host (the scripts' clock).
    now: Arc<dyn Fn() -> Duration + Send + Sync>,
    /// Every request answered: when, by which process, which API, and a
    /// hash of its bytes (two runs of one seed answer the same).
    requests: Mutex<Vec<(Duration, usize, i16, u64)>>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").finish_non_exhaustive()
    }
}

/// Why a write of the model's members did not happen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotWritten(pub String);

impl Model {
    /// A cluster `cluster` of `settings.brokers`, every process running and
    /// every partition led by its preferred replica at epoch 0; `now`
    /// reads the simulated time inside a host.
    pub fn new(
        settings: Settings,
        cluster: &str,
        now: Arc<dyn Fn() -> Duration + Send + Sync>,
    ) -> Arc<Model> {
        let mut state = State {
            generation: 0,
            data: Data::empty(cluster, &settings),
            meta: Vec::new(),
            controller: View::default(),
            controller_silent: false,
            members: settings
                .brokers
                .iter()
                .map(|(n, _)| *n)
                .filter(|n| !settings.later.contains(n))
                .collect(),
            assignment: BTreeMap::new(),
            processes: Vec::new(),
            current: BTreeMap::new(),
            truth: Truth::default(),
            dirty: true,
            settings,
        };
        state.boot(Duration::ZERO);
        Arc::new(Model {
            state: Mutex::new(state),
            changed: tokio::sync::watch::Sender::new(0),
            now,
            requests: Mutex::default(),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = lock(&self.state);
        let out = f(&mut state);
        if std::mem::take(&mut state.dirty) {
            self.changed.send_modify(|n| *n += 1);
        }
        out
    }

    /// The settings.
    pub fn settings(&self) -> Settings {
        self.with(|s| s.settings.clone())
    }

    /// The controller's work up to `now`: heartbeats, fencing and the
    /// leaderships of fenced brokers moved, registrations, unfencing,
    /// metadata applied and logs copied by the processes that follow it,
    /// timed-out transactions aborted. The run calls it before every step.
    pub fn tick(&self, now: Duration) {
        self.with(|s| s.tick(now));
    }

    /// The truth so far.
    pub fn truth(&self) -> Truth {
        self.with(|s| {
            let mut truth = s.truth.clone();
            truth.topics.extend(s.data.topic_truth());
            truth
        })
    }

    /// Every request answered so far: when, by which process, which API,
    /// and a hash of its bytes.
    pub fn requests(&self) -> Vec<(Duration, usize, i16, u64)> {
        lock(&self.requests).clone()
    }

    /// The current cluster's id.
    pub fn cluster_id(&self) -> String {
        self.with(|s| s.data.cluster.clone())
    }

    /// The process new connections to `node` reach, and whether it may
    /// answer yet (registered and caught up).
    pub fn serving(&self, node: i32) -> (usize, bool) {
        self.with(|s| match s.current.get(&node) {
            Some(&p) => (p, s.processes[p].life == Life::Running),
            None => (0, false),
        })
    }

    /// Waits until the model changes (or `within` passes).
    pub async fn changed(&self, within: Duration) {
        let mut rx = self.changed.subscribe();
        let _ = tokio::time::timeout(within, rx.changed()).await;
    }

    /// The script and gate of process `process` (`answers`).
    pub fn process(self: &Arc<Self>, process: usize) -> (Script, Gate) {
        (
            answers::script(self.clone(), process),
            answers::gate(self.clone(), process),
        )
    }

    // ---- faults ----

    /// A node of [`Settings::later`] started: it registers, is unfenced a
    /// heartbeat later, and holds no replica of the partitions there are.
    pub fn join(&self, node: i32, now: Duration) {
        self.with(|s| {
            if s.current.contains_key(&node) {
                return;
            }
            s.members.push(node);
            let id = s.processes.len();
            s.processes.push(Process::new(node, Life::Starting, now));
            s.current.insert(node, id);
            s.dirty = true;
        });
    }

    /// Kills the node's process (kill -9; the run crashes its host).
    /// A node that has not joined yet has nothing to kill.
    pub fn kill(&self, node: i32) {
        self.with(|s| {
            if let Some(&p) = s.current.get(&node) {
                s.processes[p].life = Life::Dead;
                s.dirty = true;
            }
        });
    }

    /// Starts a new process for `node` on the old one's data (a restart, or
    /// a replacement host from a copy of its data folder); it registers once
    /// the controller fenced the old one, and new connections reach it from
    /// then on. The old one, if it still runs, keeps its connections.
    pub fn start_again(&self, node: i32, now: Duration) {
        self.with(|s| s.start_process(node, now));
    }

    /// A second process for `node` beside the first (a replacement host
    /// from a copy of its data), as [`Model::start_again`]; refused while
    /// the first runs in touch with the controller: Kafka refuses a
    /// registration of a node id whose session lives
    /// (`ClusterControlManager.registerBroker`,
    /// DUPLICATE_BROKER_REGISTRATION), and a first process that heartbeats
    /// learns its epoch is stale and shuts down. A plan's replacement
    /// follows a cut; a new cluster started in between is not cut (seed
    /// 215: the first process stayed current for the controller's clients
    /// and answered the service for good).
    pub fn replace(&self, node: i32, now: Duration) -> Result<(), NotWritten> {
        self.with(|s| {
            let first = &s.processes[s.current[&node]];
            if first.life == Life::Running && !first.cut {
                return Err(NotWritten(format!(
                    "node {node}: a second process cannot register while the first heartbeats (DUPLICATE_BROKER_REGISTRATION)"
                )));
            }
            s.start_process(node, now);
            Ok(())
        })
    }

    /// SIGSTOP (`on`) or SIGCONT of the node's process; once running again
    /// it catches up with the controller after `lag`.
    pub fn pause(&self, node: i32, on: bool, lag: Duration, now: Duration) {
        self.with(|s| {
            let p = s.current[&node];
            let process = &mut s.processes[p];
            if process.paused && !on {
                process.catch_up_at = Some(now + lag);
            }
            process.paused = on;
            s.dirty = true;
        });
    }

    /// The node's disk stalls (`on`) or thaws.
    pub fn stall(&self, node: i32, on: bool) {
        self.with(|s| {
            let p = s.current[&node];
            s.processes[p].stalled = on;
            s.dirty = true;
        });
    }

    /// Cuts the node's process off from the controller (`on`), or mends the
    /// link. A process that was replaced meanwhile is shut down when it
    /// reaches the controller again (a stale broker epoch).
    pub fn cut(&self, node: i32, on: bool) {
        self.with(|s| {
            // Every process of the node still running: a replaced one is
            // the one cut.
            let running: Vec<usize> = (0..s.processes.len())
                .filter(|&p| s.processes[p].node == node && s.processes[p].life != Life::Dead)
                .collect();
            let current = s.current[&node];
            for p in running {
                if on {
                    s.processes[p].cut = p == current || s.processes[p].cut;
                } else if p != current && s.processes[p].cut {
                    s.processes[p].life = Life::Dead;
                } else {
                    s.processes[p].cut = false;
                }
            }
            s.dirty = true;
        });
    }

    /// The active controller stops (SIGSTOP), or fails and no other has
    /// taken over yet, at `now`: see [`State::controller_silent`]. What it
    /// had committed, the brokers that follow it have fetched.
    pub fn silence_controller(&self, now: Duration) {
        self.with(|s| {
            s.apply_metadata(now);
            s.controller_silent = true;
            s.dirty = true;
        });
    }

    /// The stopped controller runs again (SIGCONT) at `now`. Its fencing
    /// task, overdue, races the heartbeats waiting on its sockets: since
    /// Kafka 4.0 a heartbeat's contact time is taken before it is queued
    /// (KAFKA-17793), but the overdue periodic task may run first. Each
    /// node in `lost` loses that race: fenced if its last heartbeat taken
    /// is older than the session timeout, its leaderships moved, then
    /// unfenced by the heartbeat that follows. The others' heartbeats
    /// count first.
    pub fn resume_controller(&self, lost: &[i32], now: Duration) {
        self.with(|s| {
            s.controller_silent = false;
            let registered: Vec<(i32, Registration)> =
                s.controller.brokers.iter().map(|(n, r)| (*n, *r)).collect();
            for (node, reg) in registered {
                let process = &s.processes[reg.process];
                let stale = now.saturating_sub(process.last_heartbeat) > s.settings.session_timeout;
                if reg.fenced || !process.heartbeats() {
                    continue;
                }
                if lost.contains(&node) && stale {
                    s.fence(node, reg.process, now);
                } else {
                    s.processes[reg.process].last_heartbeat = now;
                }
            }
            s.tick(now);
        });
    }

    /// Another controller becomes active at `now` (a failover): it starts
    /// every unfenced broker's session afresh
    /// (`ClusterControlManager.activate`, KAFKA-18138, KAFKA-19130), so
    /// none is fenced for the silence, a dead one only a session timeout
    /// later.
    pub fn activate_controller(&self, now: Duration) {
        self.with(|s| {
            s.controller_silent = false;
            let unfenced: Vec<usize> = s
                .controller
                .brokers
                .values()
                .filter(|r| !r.fenced)
                .map(|r| r.process)
                .collect();
            for p in unfenced {
                s.processes[p].last_heartbeat = now;
            }
            s.tick(now);
        });
    }

    /// A preferred leader election of every partition (`kafka-leader-election`,
    /// auto leader rebalance).
    pub fn elect_preferred(&self) {
        self.with(|s| s.elect_preferred());
    }

    /// Moves the leadership of `part` to `node` (a reassignment, a
    /// controlled shutdown), when it can lead.
    pub fn move_leader(&self, part: Part, node: i32) {
        self.with(|s| s.move_leader(part, node));
    }

    /// `role`'s coordinator moved to `node`, loaded, and minted a new pair
    /// there, all at `now`: what happened while a host slept.
    pub fn move_and_init(
        &self,
        role: &str,
        node: i32,
        now: Duration,
    ) -> Result<(i64, i16), NotWritten> {
        self.with(|s| {
            let part = Part::Txn(s.txn_part(role));
            s.move_leader(part, node);
            s.tick(now);
            for process in &mut s.processes {
                if let Some((_, loaded)) = process.leading.get_mut(&part) {
                    *loaded = (*loaded).min(now);
                }
            }
            s.bump(role, now, "Empty", false)
        })
    }

    /// Another cluster formatted behind the same addresses: a new id, no
    /// record, every process new, producer ids from block 0 again. The run
    /// stops the hosts before and starts them after.
    pub fn replace_cluster(&self, cluster: &str, now: Duration) {
        self.with(|s| {
            let old = std::mem::replace(&mut s.data, Data::empty(cluster, &s.settings));
            s.truth.topics.extend(old.topic_truth());
            s.generation += 1;
            for p in &mut s.processes {
                p.life = Life::Dead;
            }
            s.meta.clear();
            s.controller = View::default();
            s.controller_silent = false;
            s.boot(now);
        });
    }

    // ---- what the members do ----

    /// InitProducerId for `role` at its coordinator: the epoch bumped, or a
    /// fresh producer id from the coordinator's block (a role never
    /// initialised, expired, or whose epoch is exhausted). The new pair.
    pub fn init_producer_id(&self, role: &str, now: Duration) -> Result<(i64, i16), NotWritten> {
        self.with(|s| s.bump(role, now, "Empty", false))
    }

    /// `role` initialised at its coordinator with a fresh producer id whose
    /// epoch a holder already bumped to `epoch` (one near exhaustion, say).
    pub fn init_worn(
        &self,
        role: &str,
        epoch: i16,
        now: Duration,
    ) -> Result<(i64, i16), NotWritten> {
        self.with(|s| {
            s.expire(role, now)?;
            let (pid, _) = s.bump(role, now, "Empty", false)?;
            let p = s.txn_part(role);
            let writer = s.writer(Part::Txn(p), now)?;
            if let Some(log) = s.data.txn.get_mut(&p) {
                log.push(TxnEntry {
                    role: role.to_owned(),
                    value: Some(TxnValue {
                        pid,
                        epoch,
                        state: "CompleteCommit",
                    }),
                });
            }
            s.appended(Part::Txn(p), writer, now);
            s.truth.held.push(Held {
                at: now,
                cluster: s.data.cluster.clone(),
                role: role.to_owned(),
                pair: Some((pid, epoch)),
            });
            Ok((pid, epoch))
        })
    }

    /// A transaction-version-2 commit by `role`'s holder: the epoch bumped
    /// (a fresh producer id once exhausted). The new pair.
    pub fn commit_tv2(&self, role: &str, now: Duration) -> Result<(i64, i16), NotWritten> {
        self.with(|s| s.bump(role, now, "CompleteCommit", true))
    }

    /// `role`'s transactional id expires (vacant longer than
    /// `transactional.id.expiration.ms`).
    pub fn expire(&self, role: &str, now: Duration) -> Result<(), NotWritten> {
        self.with(|s| s.expire(role, now))
    }

    /// The role's current pair, as the coordinator's log holds it.
    pub fn current(&self, role: &str) -> Option<(i64, i16)> {
        self.with(|s| {
            s.data
                .current(s.settings.txn_partitions, role)
                .map(|v| (v.pid, v.epoch))
        })
    }

    /// Writes a record of `role` to the coordination topic outside any
    /// transaction (a registration), at the partition's leader.
    pub fn write(
        &self,
        role: &str,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        now: Duration,
    ) -> Result<i64, NotWritten> {
        self.with(|s| {
            let p = s.topic_part(role);
            let leader = s.writer(Part::Topic(p), now)?;
            let log = s
                .data
                .topic
                .get_mut(&p)
                .ok_or_else(|| NotWritten("no such partition".into()))?;
            let offset = log.append(role, key.into(), value.map(Bytes::from), now);
            s.appended(Part::Topic(p), leader, now);
            Ok(offset)
        })
    }

    /// Writes a record of `role` in the transaction of its current pair
    /// (begun by it, or continued), at the partition's leader.
    pub fn write_in_transaction(
        &self,
        role: &str,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        now: Duration,
    ) -> Result<i64, NotWritten> {
        self.with(|s| {
            let pair = s.current_pair(role)?;
            let p = s.topic_part(role);
            let leader = s.writer(Part::Topic(p), now)?;
            let log = s
                .data
                .topic
                .get_mut(&p)
                .ok_or_else(|| NotWritten("no such partition".into()))?;
            if log.open.get(&pair.0).is_some_and(|o| o.epoch != pair.1) {
                return Err(NotWritten(
                    "fenced: the open transaction is of another epoch".into(),
                ));
            }
            let offset = log.append_txn(role, pair, key.into(), value.map(Bytes::from), now);
            s.appended(Part::Topic(p), leader, now);
            Ok(offset)
        })
    }

    /// Ends `role`'s open transaction: COMMIT or ABORT (EndTxn, TV1: the
    /// pair stays).
    pub fn end_transaction(
        &self,
        role: &str,
        commit: bool,
        now: Duration,
    ) -> Result<i64, NotWritten> {
        self.with(|s| {
            let pair = s.current_pair(role)?;
            let p = s.topic_part(role);
            let leader = s.writer(Part::Topic(p), now)?;
            s.writer(Part::Txn(s.txn_part(role)), now)?;
            let log = s
                .data
                .topic
                .get_mut(&p)
                .ok_or_else(|| NotWritten("no such partition".into()))?;
            if log.open.get(&pair.0).is_none_or(|o| o.epoch != pair.1) {
                return Err(NotWritten("no open transaction of the current pair".into()));
            }
            let offset = log
                .end(pair.0, pair.1, commit, now)
                .ok_or_else(|| NotWritten("nothing open".into()))?;
            s.appended(Part::Topic(p), leader, now);
            Ok(offset)
        })
    }

    /// Compacts the coordination topic's partition `partition`.
    pub fn compact(&self, partition: i32, now: Duration) {
        self.with(|s| {
            if let Some(log) = s.data.topic.get_mut(&partition) {
                log.compact(now, s.settings.min_compaction_lag);
                log.refresh_visible(now);
                s.dirty = true;
            }
        });
    }

    /// The partition of the coordination topic that holds `role`.
    pub fn topic_partition(&self, role: &str) -> i32 {
        self.with(|s| s.topic_part(role))
    }

    /// The partition of `__transaction_state` that holds `role`.
    pub fn txn_partition(&self, role: &str) -> i32 {
        self.with(|s| s.txn_part(role))
    }

    /// The replicas of `part`, the preferred leader first.
    pub fn replicas(&self, part: Part) -> Vec<i32> {
        self.with(|s| s.replicas(part))
    }

    /// The node leading `part` as the controller has it, at which epoch.
    pub fn leader(&self, part: Part) -> Option<(i32, i32)> {
        self.with(|s| s.controller.leader(part).map(|l| (l.leader, l.epoch)))
    }

    /// The processes that answer from a view behind the controller's (cut
    /// off, paused and not caught up, replaced while cut), each with its
    /// node, whether a new connection to the node reaches it, and the roles
    /// it still names itself coordinator of with the pair it would
    /// describe: where a client is most easily misled, so the observers
    /// aim there.
    pub fn behind(&self) -> Vec<Behind> {
        self.with(|s| {
            let roles: std::collections::BTreeSet<&str> = s
                .truth
                .held
                .iter()
                .filter(|h| h.cluster == s.data.cluster)
                .map(|h| h.role.as_str())
                .collect();
            (0..s.processes.len())
                .filter_map(|p| {
                    let process = &s.processes[p];
                    let node = process.node;
                    let stale = process.life == Life::Running
                        && process.answers()
                        && process.view.applied < s.meta.len();
                    stale.then(|| {
                        let named = roles
                            .iter()
                            .filter_map(|&role| {
                                let i = s.txn_part(role);
                                process.leading.get(&Part::Txn(i))?;
                                let known = process.known.get(&Part::Txn(i)).copied()?;
                                let v = latest(&s.data.txn[&i], known, role)?;
                                Some((role.to_owned(), (v.pid, v.epoch)))
                            })
                            .collect();
                        Behind {
                            node,
                            reached: s.current.get(&node) == Some(&p),
                            named,
                        }
                    })
                })
                .collect()
        })
    }
}

impl Data {
    fn empty(cluster: &str, settings: &Settings) -> Data {
        Data {
            cluster: cluster.to_owned(),
            txn: (0..settings.txn_partitions)
                .map(|p| (p, Vec::new()))
                .collect(),
            topic: (0..settings.topic_partitions)
                .map(|p| (p, topic::Log::default()))
                .collect(),
            next_block: 0,
        }
    }

    /// The role's latest record in `__transaction_state`.
    fn current(&self, partitions: i32, role: &str) -> Option<TxnValue> {
        let p = hashing::txn_partition(role, partitions);
        latest(&self.txn[&p], self.txn[&p].len(), role)
    }

    fn topic_truth(&self) -> Vec<TopicTruth> {
        self.topic
            .iter()
            .map(|(p, log)| TopicTruth {
                cluster: self.cluster.clone(),
                partition: *p,
                visible: log.visible.clone(),
            })
            .collect()
    }
}

/// The latest value of `role` in the prefix `log[..len]`.
fn latest(log: &[TxnEntry], len: usize, role: &str) -> Option<TxnValue> {
    log[..len.min(log.len())]
        .iter()
        .rev()
        .find(|e| e.role == role)
        .and_then(|e| e.value)
}

impl State {
    /// The pair a member of `role` writes under: the role's current one.
    fn current_pair(&self, role: &str) -> Result<(i64, i16), NotWritten> {
        self.data
            .current(self.settings.txn_partitions, role)
            .map(|v| (v.pid, v.epoch))
            .ok_or_else(|| NotWritten(format!("{role} has no producer id")))
    }

    fn txn_part(&self, role: &str) -> i32 {
        hashing::txn_partition(role, self.settings.txn_partitions)
    }

    fn topic_part(&self, role: &str) -> i32 {
        hashing::role_partition(role, self.settings.topic_partitions)
    }

    fn parts(&self) -> Vec<Part> {
        (0..self.settings.txn_partitions)
            .map(Part::Txn)
            .chain((0..self.settings.topic_partitions).map(Part::Topic))
            .collect()
    }

    /// The nodes started so far.
    fn nodes(&self) -> Vec<i32> {
        self.members.clone()
    }

    /// The replicas of `part`, the preferred one first, as assigned when
    /// the cluster was formatted ([`replicas_of`]).
    fn replicas(&self, part: Part) -> Vec<i32> {
        self.assignment.get(&part).cloned().unwrap_or_default()
    }

    /// The preferred replica of `part` (the first of its assignment).
    fn preferred(&self, part: Part) -> i32 {
        self.replicas(part)[0]
    }

    /// The `min.insync.replicas` of `part`, at most its replicas
    /// (`Partition.effectiveMinIsr`).
    fn min_isr(&self, part: Part) -> usize {
        let min = match part {
            Part::Txn(_) => self.settings.min_isr,
            Part::Topic(_) => self.settings.topic_min_isr,
        };
        usize::try_from(min.max(1))
            .unwrap_or(1)
            .min(self.settings.replication_factor.max(1))
    }

    /// A fresh cluster: a running process per node, every partition led by
    /// its preferred replica at epoch 0.
    fn boot(&mut self, now: Duration) {
        let nodes = self.nodes();
        self.assignment = self
            .parts()
            .into_iter()
            .map(|part| {
                let replicas = replicas_of(part, &nodes, self.settings.replication_factor);
                (part, replicas)
            })
            .collect();
        for node in nodes {
            let id = self.processes.len();
            let mut process = Process::new(node, Life::Running, now);
            process.known = self.parts().into_iter().map(|p| (p, 0)).collect();
            self.processes.push(process);
            self.current.insert(node, id);
            self.meta.push(Meta::Register { node, process: id });
            self.meta.push(Meta::Unfence { node, process: id });
        }
        for part in self.parts() {
            let isr = self.replicas(part);
            self.meta.push(Meta::Leader {
                part,
                leader: isr[0],
                epoch: 0,
                isr,
                elr: Vec::new(),
            });
        }
        self.controller.advance(&self.meta);
        for p in 0..self.processes.len() {
            if self.processes[p].life == Life::Running {
                let mut view = self.processes[p].view.clone();
                view.advance(&self.meta);
                self.processes[p].view = view;
                self.note_leading(p, Duration::ZERO);
            }
        }
        self.truth.clusters.push((now, self.data.cluster.clone()));
        self.dirty = true;
    }

    fn append_meta(&mut self, record: Meta) {
        self.meta.push(record);
        self.controller.advance(&self.meta);
        self.dirty = true;
    }

    /// Notes the partitions process `p` leads in its view, loaded at
    /// `loaded` (a coordinator loads a partition it newly leads).
    fn note_leading(&mut self, p: usize, loaded: Duration) {
        let node = self.processes[p].node;
        let led: Vec<(Part, i32)> = self.processes[p]
            .view
            .leaders
            .iter()
            .filter(|(_, l)| l.leader == node)
            .map(|(part, l)| (*part, l.epoch))
            .collect();
        let process = &mut self.processes[p];
        process
            .leading
            .retain(|part, _| led.iter().any(|(q, _)| q == part));
        for (part, epoch) in led {
            match process.leading.get(&part) {
                Some((e, _)) if *e == epoch => {}
                _ => {
                    process.leading.insert(part, (epoch, loaded));
                }
            }
        }
    }

    fn start_process(&mut self, node: i32, now: Duration) {
        let old = self.current[&node];
        let id = self.processes.len();
        let mut process = self.processes[old].clone();
        process.life = Life::Starting;
        process.paused = false;
        process.stalled = false;
        process.cut = false;
        process.catch_up_at = None;
        process.view = View::default();
        process.leading = BTreeMap::new();
        process.block = None;
        process.last_heartbeat = now;
        self.processes.push(process);
        self.current.insert(node, id);
        self.dirty = true;
    }

    /// The process that may write `part` now: the controller's leader of
    /// it, running, not paused or stalled, its own view agreeing, the
    /// partition loaded.
    fn writer(&self, part: Part, now: Duration) -> Result<usize, NotWritten> {
        let lead = self
            .controller
            .leader(part)
            .filter(|l| l.leader >= 0)
            .ok_or_else(|| NotWritten(format!("{part:?} has no leader")))?;
        let reg = self
            .controller
            .brokers
            .get(&lead.leader)
            .filter(|r| !r.fenced)
            .ok_or_else(|| NotWritten(format!("{part:?}: its leader is fenced")))?;
        let process = &self.processes[reg.process];
        if !process.answers() {
            return Err(NotWritten(format!("{part:?}: its leader does not run")));
        }
        match process.leading.get(&part) {
            Some((epoch, loaded)) if *epoch == lead.epoch => {
                if matches!(part, Part::Txn(_)) && now < *loaded {
                    return Err(NotWritten(format!("{part:?}: loading")));
                }
                // acks=all below min.insync.replicas, by the ISR the leader
                // knows: refused before the append
                // (`Partition.appendRecordsToLeader`).
                let isr = process.view.leader(part).map_or(&lead.isr, |l| &l.isr);
                if isr.len() < self.min_isr(part) {
                    let answer = match part {
                        Part::Txn(_) => "the coordinator answers COORDINATOR_NOT_AVAILABLE",
                        Part::Topic(_) => "the producer is answered",
                    };
                    return Err(NotWritten(format!(
                        "{part:?}: NOT_ENOUGH_REPLICAS: ISR {isr:?} below min.insync.replicas {} ({answer}, retriable)",
                        self.min_isr(part)
                    )));
                }
                // acks=all commits once every ISR member copied the append.
                // One that copies nothing now (paused, cut off, stalled,
                // catching up) holds it in purgatory until the controller
                // drops it from the ISR at fencing, when it commits if
                // min.isr remain (`Partition.checkEnoughReplicasReachOffset`)
                // or fails. The model refuses it at once instead: it never
                // commits what Kafka would not, and forgoes the late commit.
                let lagging: Vec<i32> = isr
                    .iter()
                    .copied()
                    .filter(|&r| r != lead.leader && !self.copies(r))
                    .collect();
                if !lagging.is_empty() {
                    return Err(NotWritten(format!(
                        "{part:?}: ISR {isr:?}: {lagging:?} copy nothing, so acks=all waits (the request times out)"
                    )));
                }
                Ok(reg.process)
            }
            _ => Err(NotWritten(format!(
                "{part:?}: its leader has not applied it"
            ))),
        }
    }

    /// After an append to `part` at `writer`: every replica of it that
    /// copies the controller's leaders holds it too.
    fn appended(&mut self, part: Part, writer: usize, now: Duration) {
        let len = self.log_len(part);
        let replicas = self.replicas(part);
        let copying: Vec<usize> = (0..self.processes.len())
            .filter(|&i| {
                let node = self.processes[i].node;
                i == writer
                    || (self.fetches(i)
                        && replicas.contains(&node)
                        && self.current.get(&node) == Some(&i))
            })
            .collect();
        for i in copying {
            self.processes[i].known.insert(part, len);
        }
        if let Part::Topic(p) = part
            && let Some(log) = self.data.topic.get_mut(&p)
        {
            log.refresh_visible(now);
        }
        self.dirty = true;
    }

    /// The next id of the coordinator's block, or a new block from the
    /// controller (`AllocateProducerIds`: not while it is silent; the
    /// coordinator answers COORDINATOR_LOAD_IN_PROGRESS, retriable).
    fn draw_producer_id(&mut self, process: usize) -> Result<i64, NotWritten> {
        const BLOCK: i64 = 1000;
        let block = match self.processes[process].block {
            Some((next, end)) if next < end => (next, end),
            _ if self.controller_silent => {
                return Err(NotWritten(
                    "no producer id block: the controller is silent".to_owned(),
                ));
            }
            _ => {
                let start = self.data.next_block * BLOCK;
                self.data.next_block += 1;
                (start, start + BLOCK)
            }
        };
        self.processes[process].block = Some((block.0 + 1, block.1));
        Ok(block.0)
    }

    fn bump(
        &mut self,
        role: &str,
        now: Duration,
        state: &'static str,
        commit: bool,
    ) -> Result<(i64, i16), NotWritten> {
        let p = self.txn_part(role);
        let writer = self.writer(Part::Txn(p), now)?;
        let current = self.data.current(self.settings.txn_partitions, role);
        // A commit's bump that would reach the exhausted epoch takes a new
        // producer id (KIP-890); InitProducerId rotates away from it.
        let rotate = current.is_none_or(|v| {
            if commit {
                v.epoch >= EXHAUSTED_EPOCH - 1
            } else {
                v.epoch >= EXHAUSTED_EPOCH
            }
        });
        let pair = match current {
            Some(v) if !rotate => (v.pid, v.epoch + 1),
            _ => (self.draw_producer_id(writer)?, 0),
        };
        if let Some(log) = self.data.txn.get_mut(&p) {
            log.push(TxnEntry {
                role: role.to_owned(),
                value: Some(TxnValue {
                    pid: pair.0,
                    epoch: pair.1,
                    state,
                }),
            });
        }
        self.appended(Part::Txn(p), writer, now);
        self.truth.held.push(Held {
            at: now,
            cluster: self.data.cluster.clone(),
            role: role.to_owned(),
            pair: Some(pair),
        });
        Ok(pair)
    }

    fn expire(&mut self, role: &str, now: Duration) -> Result<(), NotWritten> {
        let p = self.txn_part(role);
        let writer = self.writer(Part::Txn(p), now)?;
        if self
            .data
            .current(self.settings.txn_partitions, role)
            .is_none()
        {
            return Ok(());
        }
        if let Some(log) = self.data.txn.get_mut(&p) {
            log.push(TxnEntry {
                role: role.to_owned(),
                value: None,
            });
        }
        self.appended(Part::Txn(p), writer, now);
        self.truth.held.push(Held {
            at: now,
            cluster: self.data.cluster.clone(),
            role: role.to_owned(),
            pair: None,
        });
        Ok(())
    }

    /// Whether `node`'s current process copies its partitions' logs now.
    fn copies(&self, node: i32) -> bool {
        self.current.get(&node).is_some_and(|&p| self.fetches(p))
    }

    /// Whether process `p` fetches what its leaders append: it replicates,
    /// and has the controller's view or gets it within the tick. One left
    /// behind while the controller is silent (it caught up with nothing to
    /// catch up from) follows the leaders it knew, itself perhaps, and
    /// fetches nothing.
    fn fetches(&self, p: usize) -> bool {
        let process = &self.processes[p];
        process.replicates() && !(self.controller_silent && process.view.applied < self.meta.len())
    }

    fn log_len(&self, part: Part) -> usize {
        match part {
            Part::Txn(p) => self.data.txn[&p].len(),
            Part::Topic(p) => self.data.topic[&p].len(),
        }
    }

    /// Whether `node` may join the ISR of `part` now: a replica whose
    /// current process runs, follows the controller, is registered
    /// unfenced and holds the whole log (`Partition.isReplicaIsrEligible`
    /// and the follower's fetch offset).
    fn caught_up(&self, part: Part, node: i32) -> bool {
        let Some(reg) = self.controller.brokers.get(&node).filter(|r| !r.fenced) else {
            return false;
        };
        self.replicas(part).contains(&node)
            && self.fetches(reg.process)
            && self.processes[reg.process]
                .known
                .get(&part)
                .copied()
                .unwrap_or(0)
                >= self.log_len(part)
    }

    /// Whether `node` may be elected leader of `part` now
    /// ([`Self::electable`]).
    fn can_lead(&self, part: Part, node: i32) -> bool {
        self.controller
            .leader(part)
            .is_some_and(|l| self.electable(part, &l.isr, &l.elr, node) == node)
    }

    /// The first replica of `part` in assignment order that may lead it
    /// with ISR `isr` and ELR `elr` (`only`: that one, else any): in the
    /// ISR, or in the ELR while the ISR is empty, and registered unfenced
    /// (`PartitionChangeBuilder.electAnyLeader`, `isValidNewLeader`,
    /// `isAcceptableLeader`; no unclean election); -1 when none may. What
    /// its process does is not the controller's to know: a paused or dead
    /// one whose session has not yet ended is elected, and one unfenced a
    /// moment ago still applying the metadata it missed leads before it
    /// knows it.
    fn electable(&self, part: Part, isr: &[i32], elr: &[i32], only: i32) -> i32 {
        self.replicas(part)
            .into_iter()
            .filter(|&n| only < 0 || n == only)
            .find(|&n| {
                (isr.contains(&n) || (isr.is_empty() && elr.contains(&n)))
                    && self.controller.brokers.get(&n).is_some_and(|r| !r.fenced)
            })
            .unwrap_or(-1)
    }

    /// The ELR of `part` once its ISR is `isr`: below min.isr, the
    /// replicas that leave the ISR join it; at or above, it is emptied
    /// (`PartitionChangeBuilder.maybePopulateTargetElr`).
    fn elr_with(&self, part: Part, isr: &[i32]) -> Vec<i32> {
        let Some(old) = self.controller.leader(part) else {
            return Vec::new();
        };
        if isr.len() >= self.min_isr(part) {
            return Vec::new();
        }
        let mut elr: Vec<i32> = old.elr.iter().chain(&old.isr).copied().collect();
        elr.retain(|r| !isr.contains(r));
        elr.sort_unstable();
        elr.dedup();
        elr
    }

    /// Appends a change of `part`: `leader` (a new leader epoch only when
    /// it changes: `PartitionChangeBuilder` bumps it on an ISR shrink only
    /// before metadata version 3.6), its ISR, and the ELR that follows
    /// ([`Self::elr_with`]). A leader elected from the ELR makes the ISR
    /// itself alone (`PartitionChangeBuilder.tryElection`).
    fn change(&mut self, part: Part, leader: i32, isr: Vec<i32>) {
        let Some(old) = self.controller.leader(part).cloned() else {
            return;
        };
        let mut elr = self.elr_with(part, &isr);
        let mut isr = isr;
        if leader != old.leader && leader >= 0 && !isr.contains(&leader) && elr.contains(&leader) {
            elr.retain(|r| *r != leader);
            isr = vec![leader];
        }
        let epoch = match old.leader == leader {
            true => old.epoch,
            false => old.epoch + 1,
        };
        if old.leader == leader && old.isr == isr && old.elr == elr {
            return;
        }
        self.append_meta(Meta::Leader {
            part,
            leader,
            epoch,
            isr,
            elr,
        });
    }

    /// Fences `node`'s registered process `process` at `now`
    /// (`ReplicationControlManager.maybeFenceOneStaleBroker`).
    fn fence(&mut self, node: i32, process: usize, now: Duration) {
        self.append_meta(Meta::Fence { node, process });
        self.processes[process].fenced_at = now;
        self.fence_out(node);
    }

    /// `node`, just fenced, leaves every ISR, and the partitions it led get
    /// a leader from the ISR left (or the ELR), else none
    /// (`ReplicationControlManager.handleBrokerFenced`, through
    /// `generateLeaderAndIsrUpdates`). The ISR may go below min.isr, to
    /// nothing, the replicas it drops then eligible from the ELR (KIP-966,
    /// on by default since Kafka 4.1); without ELR the last member would
    /// stay in the ISR, which elects the same leaders here.
    fn fence_out(&mut self, node: i32) {
        for part in self.parts() {
            let Some(old) = self.controller.leader(part).cloned() else {
                continue;
            };
            if old.leader != node && !old.isr.contains(&node) {
                continue;
            }
            let isr: Vec<i32> = old.isr.iter().copied().filter(|&r| r != node).collect();
            let leader = match old.leader == node {
                true => self.electable(part, &isr, &self.elr_with(part, &isr), -1),
                false => old.leader,
            };
            self.change(part, leader, isr);
        }
    }

    /// A partition without a leader gets one once a replica in its ISR (or
    /// ELR, the ISR empty) can lead (`ReplicationControlManager
    /// .handleBrokerUnfenced`).
    fn elect_leaderless(&mut self, part: Part) {
        if let Some(old) = self.controller.leader(part).cloned()
            && old.leader == -1
        {
            let leader = self.electable(part, &old.isr, &old.elr, -1);
            if leader >= 0 {
                self.change(part, leader, old.isr);
            }
        }
    }

    /// The leader of `part` adds the caught-up, unfenced replicas missing
    /// from its ISR (`Partition.maybeExpandIsr`, `isReplicaIsrEligible`:
    /// an AlterPartition the controller takes), while it runs and reaches
    /// the controller, knowing it leads. No new leader epoch.
    fn expand_isr(&mut self, part: Part) {
        let Some(old) = self.controller.leader(part).cloned() else {
            return;
        };
        let Some(reg) = self
            .controller
            .brokers
            .get(&old.leader)
            .filter(|r| !r.fenced)
        else {
            return;
        };
        let leader = &self.processes[reg.process];
        if !leader.follows_controller()
            || leader.leading.get(&part).map(|(e, _)| *e) != Some(old.epoch)
        {
            return;
        }
        let joining: Vec<i32> = self
            .replicas(part)
            .into_iter()
            .filter(|&r| !old.isr.contains(&r) && self.caught_up(part, r))
            .collect();
        if !joining.is_empty() {
            let isr = old.isr.iter().chain(&joining).copied().collect();
            self.change(part, old.leader, isr);
        }
    }

    fn elect_preferred(&mut self) {
        if self.controller_silent {
            return;
        }
        for part in self.parts() {
            let preferred = self.preferred(part);
            if let Some(old) = self.controller.leader(part).cloned()
                && old.leader != preferred
                && self.can_lead(part, preferred)
            {
                self.change(part, preferred, old.isr);
            }
        }
    }

    fn move_leader(&mut self, part: Part, node: i32) {
        if self.controller_silent {
            return;
        }
        if let Some(old) = self.controller.leader(part).cloned()
            && old.leader != node
            && self.can_lead(part, node)
        {
            self.change(part, node, old.isr);
        }
    }

    fn tick(&mut self, now: Duration) {
        let settings = self.settings.clone();
        let silent = self.controller_silent;
        // Heartbeats, and the end of a paused process's catching up.
        for process in &mut self.processes {
            if process.heartbeats() && !silent {
                process.last_heartbeat = now;
            }
            if process.catch_up_at.is_some_and(|at| at <= now) {
                process.catch_up_at = None;
                self.dirty = true;
            }
        }
        if silent {
            self.copy_logs();
            self.abort_timed_out(now);
            return;
        }
        // Registrations: a starting process once its node's registered one
        // is fenced.
        for p in 0..self.processes.len() {
            if self.processes[p].life != Life::Starting {
                continue;
            }
            let node = self.processes[p].node;
            let free = self
                .controller
                .brokers
                .get(&node)
                .is_none_or(|r| r.fenced || r.process == p);
            if free {
                self.append_meta(Meta::Register { node, process: p });
                let mut view = View::default();
                view.advance(&self.meta);
                let process = &mut self.processes[p];
                process.view = view;
                process.life = Life::Running;
                process.fenced_at = now;
                self.note_leading(p, now + settings.load);
            }
        }
        // Fencing: a registered process silent past the session timeout,
        // out of every ISR and its leaderships moved.
        let registered: Vec<(i32, Registration)> = self
            .controller
            .brokers
            .iter()
            .map(|(n, r)| (*n, *r))
            .collect();
        for (node, reg) in &registered {
            let process = &self.processes[reg.process];
            // A killed process too: only its silence tells the controller.
            let silent = now.saturating_sub(process.last_heartbeat) > settings.session_timeout;
            if !reg.fenced && silent {
                self.fence(*node, reg.process, now);
            }
        }
        self.apply_metadata(now);
        self.copy_logs();
        // Unfencing: a fenced process that heartbeats again and caught up.
        let registered: Vec<(i32, Registration)> = self
            .controller
            .brokers
            .iter()
            .map(|(n, r)| (*n, *r))
            .collect();
        for (node, reg) in registered {
            let process = &self.processes[reg.process];
            if reg.fenced
                && process.heartbeats()
                && process.view.applied > self.registered_at(node, reg.process)
                && now >= process.fenced_at + settings.heartbeat
            {
                self.append_meta(Meta::Unfence {
                    node,
                    process: reg.process,
                });
            }
        }
        // Partitions without a leader get one once a replica can lead; the
        // leaders take caught-up followers back into their ISRs.
        // `replica.lag.time.max.ms` (30 s) never shrinks one here: a
        // registered broker that copies nothing (paused, cut) is fenced at
        // the session timeout (9 s) first, and a stall or a catch-up is
        // shorter.
        for part in self.parts() {
            self.elect_leaderless(part);
            self.expand_isr(part);
        }
        self.abort_timed_out(now);
    }

    /// Metadata applied by the processes that follow the controller (within
    /// the tick: milliseconds).
    fn apply_metadata(&mut self, now: Duration) {
        for p in 0..self.processes.len() {
            if !self.processes[p].follows_controller() {
                continue;
            }
            if self.processes[p].view.applied < self.meta.len() {
                let mut view = std::mem::take(&mut self.processes[p].view);
                view.advance(&self.meta);
                self.processes[p].view = view;
                self.note_leading(p, now + self.settings.load);
                self.dirty = true;
            }
        }
    }

    /// Every replica whose current process copies takes its partitions'
    /// logs whole (within the tick: milliseconds); a follower fetches from
    /// its leader, with or without a controller.
    fn copy_logs(&mut self) {
        for p in 0..self.processes.len() {
            let node = self.processes[p].node;
            if !self.fetches(p) || self.current.get(&node) != Some(&p) {
                continue;
            }
            for part in self.parts() {
                if !self.replicas(part).contains(&node) {
                    continue;
                }
                let len = self.log_len(part);
                if self.processes[p].known.get(&part) != Some(&len) {
                    self.processes[p].known.insert(part, len);
                    self.dirty = true;
                }
            }
        }
    }

    /// The offset of process `process`'s registration record: it is
    /// unfenced on a heartbeat that reports a metadata offset past it
    /// (`BrokerHeartbeatManager.calculateNextBrokerState`), however much
    /// else it has still to apply.
    fn registered_at(&self, node: i32, process: usize) -> usize {
        self.meta
            .iter()
            .rposition(|m| matches!(m, Meta::Register { node: n, process: q } if *n == node && *q == process))
            .unwrap_or(0)
    }

    /// Transactions left open past the timeout: the coordinator aborts
    /// them, bumping the epoch (`TransactionCoordinator
    /// .abortTimedOutTransactions`; no controller needed).
    fn abort_timed_out(&mut self, now: Duration) {
        let mut timed_out = Vec::new();
        for (p, log) in &self.data.topic {
            for (pid, open) in &log.open {
                if now >= open.since + self.settings.transaction_timeout {
                    timed_out.push((*p, *pid, open.role.clone(), open.epoch));
                }
            }
        }
        for (p, pid, role, epoch) in timed_out {
            let Ok(topic_writer) = self.writer(Part::Topic(p), now) else {
                continue;
            };
            let current = self.data.current(self.settings.txn_partitions, &role);
            let bumped = match current {
                Some(v) if v.pid == pid && v.epoch == epoch => {
                    match self.bump(&role, now, "CompleteAbort", false) {
                        Ok(pair) if pair.0 == pid => pair.1,
                        Ok(_) => epoch,
                        Err(_) => continue,
                    }
                }
                _ => epoch,
            };
            if let Some(log) = self.data.topic.get_mut(&p) {
                log.end(pid, bumped, false, now);
            }
            self.appended(Part::Topic(p), topic_writer, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Four brokers, RF 3, min.isr 2: `Txn(0)` lives on 1, 2 and 3.
    fn model() -> Arc<Model> {
        let settings = Settings {
            brokers: (1..=4).map(|n| (n, format!("b{n}:9092"))).collect(),
            txn_partitions: 3,
            replication_factor: 3,
            min_isr: 2,
            topic_min_isr: 1,
            later: Vec::new(),
            topic: "t".into(),
            topic_partitions: 2,
            session_timeout: secs(9),
            heartbeat: secs(2),
            load: Duration::ZERO,
            transaction_timeout: secs(60),
            min_compaction_lag: secs(30),
        };
        Model::new(settings, "c", Arc::new(|| Duration::ZERO))
    }

    /// A role whose id lives in `Txn(0)`.
    fn role_in_txn_0() -> String {
        (0..100)
            .map(|i| format!("r{i}"))
            .find(|r| txn_partition_of(r, 3) == 0)
            .unwrap()
    }

    fn isr(model: &Model, part: Part) -> (i32, i32, Vec<i32>, Vec<i32>) {
        model.with(|s| {
            let l = s.controller.leader(part).cloned().unwrap();
            (l.leader, l.epoch, l.isr, l.elr)
        })
    }

    #[test]
    fn fencing_shrinks_the_isr_and_a_write_needs_min_isr_of_it() {
        let model = model();
        let role = role_in_txn_0();
        let part = Part::Txn(0);
        assert_eq!(model.replicas(part), [1, 2, 3]);
        assert_eq!(model.replicas(Part::Txn(2)), [3, 4, 1]);
        model.tick(secs(0));
        assert_eq!(isr(&model, part), (1, 0, vec![1, 2, 3], vec![]));
        // A rack: the leader and a broker holding no replica.
        model.cut(1, true);
        model.cut(4, true);
        model.tick(secs(10));
        assert_eq!(isr(&model, part), (2, 1, vec![2, 3], vec![]));
        let minted = model.init_producer_id(&role, secs(10)).unwrap();
        // The rack's broker never copied it.
        let copied =
            |node: i32| model.with(|s| s.processes[s.current[&node]].known.get(&part).copied());
        assert_eq!(
            (copied(1), copied(3), copied(4)),
            (Some(0), Some(1), Some(0))
        );
        // One more cut: while it is in the ISR an append waits for it;
        // fenced, the ISR is below min.isr, no write; the replica dropped
        // is an eligible leader.
        model.cut(3, true);
        model.tick(secs(12));
        let waits = model.init_producer_id(&role, secs(12)).unwrap_err();
        assert!(waits.0.contains("[3] copy nothing"), "{waits:?}");
        model.tick(secs(20));
        assert_eq!(isr(&model, part), (2, 1, vec![2], vec![3]));
        let refused = model.init_producer_id(&role, secs(20)).unwrap_err();
        assert!(refused.0.contains("NOT_ENOUGH_REPLICAS"), "{refused:?}");
        // Mended: unfenced, caught up, back in the ISR (no new epoch).
        model.cut(1, false);
        model.cut(3, false);
        model.tick(secs(21));
        model.tick(secs(23));
        model.tick(secs(23));
        assert_eq!(isr(&model, part), (2, 1, vec![2, 1, 3], vec![]));
        let next = model.init_producer_id(&role, secs(23)).unwrap();
        assert_eq!(next, (minted.0, minted.1 + 1));
    }

    #[test]
    fn the_last_replica_fenced_leaves_the_partition_to_its_elr() {
        let model = model();
        let part = Part::Txn(0);
        model.tick(secs(0));
        for node in [2, 3] {
            model.cut(node, true);
        }
        model.tick(secs(10));
        // Fenced in turn: 2 left an ISR of min.isr, 3 went below it.
        assert_eq!(isr(&model, part), (1, 0, vec![1], vec![3]));
        model.cut(1, true);
        model.tick(secs(20));
        assert_eq!(isr(&model, part), (-1, 1, vec![], vec![1, 3]));
        // Back, 2 may not lead (it may lack what 1 and 3 acked); 3 may,
        // alone in the ISR, and takes 2 in once it caught up.
        model.cut(2, false);
        model.tick(secs(21));
        model.tick(secs(23));
        model.tick(secs(23));
        assert_eq!(isr(&model, part), (-1, 1, vec![], vec![1, 3]));
        model.cut(3, false);
        model.tick(secs(24));
        model.tick(secs(26));
        model.tick(secs(26));
        assert_eq!(isr(&model, part), (3, 2, vec![3, 2], vec![]));
    }

    fn fenced(model: &Model, node: i32) -> bool {
        model.with(|s| s.controller.brokers[&node].fenced)
    }

    #[test]
    fn a_silent_controller_fences_nobody_and_on_resume_fences_who_lost_the_race() {
        let model = model();
        let part = Part::Txn(0);
        model.tick(secs(0));
        model.silence_controller(secs(0));
        model.tick(secs(5));
        model.tick(secs(12));
        // Nothing moves: no fencing, no election, no new producer id block.
        model.move_leader(part, 2);
        assert_eq!(isr(&model, part), (1, 0, vec![1, 2, 3], vec![]));
        assert!((1..=4).all(|n| !fenced(&model, n)));
        let role = role_in_txn_0();
        let refused = model.init_producer_id(&role, secs(12)).unwrap_err();
        assert!(refused.0.contains("controller is silent"), "{refused:?}");
        // SIGCONT: 1's heartbeat came too late, the others' in time.
        model.resume_controller(&[1], secs(12));
        assert!(fenced(&model, 1) && !fenced(&model, 2));
        assert_eq!(isr(&model, part), (2, 1, vec![2, 3], vec![]));
        // Unfenced a heartbeat later, back in the ISR.
        model.tick(secs(14));
        model.tick(secs(14));
        assert!(!fenced(&model, 1));
        assert_eq!(isr(&model, part), (2, 1, vec![2, 3, 1], vec![]));
    }

    #[test]
    fn a_broker_behind_a_silent_controller_fetches_nothing() {
        let model = model();
        let role = role_in_txn_0();
        model.tick(secs(0));
        model.init_producer_id(&role, secs(0)).unwrap();
        // Paused within its session; resumed, it has missed a leader
        // change (1 took Txn(0) back) when the controller goes silent.
        model.move_leader(Part::Txn(0), 2);
        model.pause(3, true, Duration::ZERO, secs(0));
        model.tick(secs(1));
        model.elect_preferred();
        model.pause(3, false, secs(1), secs(2));
        model.silence_controller(secs(2));
        model.tick(secs(4));
        // Done catching up, it has nothing to catch up from: 1's append
        // waits for it.
        let waits = model.init_producer_id(&role, secs(4)).unwrap_err();
        assert!(waits.0.contains("[3] copy nothing"), "{waits:?}");
        model.resume_controller(&[], secs(5));
        model.init_producer_id(&role, secs(5)).unwrap();
    }

    #[test]
    fn a_new_active_controller_starts_every_session_afresh() {
        let model = model();
        model.tick(secs(0));
        model.kill(2);
        model.silence_controller(secs(0));
        model.tick(secs(8));
        model.activate_controller(secs(8));
        model.tick(secs(16));
        assert!(!fenced(&model, 2), "fenced before its new session ended");
        model.tick(secs(18));
        assert!(fenced(&model, 2));
    }

    #[test]
    fn a_resumed_broker_is_unfenced_and_elected_before_it_applied_what_it_missed() {
        let model = model();
        let part = Part::Txn(0);
        model.tick(secs(0));
        // Paused past the session timeout: fenced, out of the ISR; resumed,
        // unfenced on its first heartbeat though 3 s from caught up (its
        // registration is long applied).
        model.pause(3, true, Duration::ZERO, secs(0));
        model.tick(secs(10));
        assert!(fenced(&model, 3));
        model.pause(3, false, secs(3), secs(10));
        model.tick(secs(12));
        let behind = model.with(|s| s.processes[s.current[&3]].view.applied < s.meta.len());
        assert!(!fenced(&model, 3) && behind);
        // Paused within its session: still in the ISR, so the preferred
        // election right after its resume makes it leader while its own
        // view names it leader at the epoch it had.
        model.tick(secs(16));
        model.pause(1, true, Duration::ZERO, secs(16));
        model.tick(secs(17));
        model.move_leader(part, 2);
        assert_eq!(isr(&model, part).0, 2);
        model.pause(1, false, secs(3), secs(20));
        model.tick(secs(20));
        model.elect_preferred();
        let (leader, epoch, _, _) = isr(&model, part);
        assert_eq!(leader, 1);
        let own = model.with(|s| s.processes[s.current[&1]].view.leader(part).unwrap().epoch);
        assert!(own < epoch, "its view: {own}, the controller's: {epoch}");
        let role = role_in_txn_0();
        let waits = model.init_producer_id(&role, secs(20)).unwrap_err();
        assert!(waits.0.contains("has not applied"), "{waits:?}");
        model.tick(secs(23));
        model.init_producer_id(&role, secs(23)).unwrap();
    }

    #[test]
    fn a_cluster_grown_from_one_broker_keeps_its_partitions_where_they_were() {
        let settings = Settings {
            brokers: (1..=3).map(|n| (n, format!("b{n}:9092"))).collect(),
            replication_factor: 1,
            min_isr: 1,
            later: vec![2, 3],
            ..model().settings()
        };
        let model = Model::new(settings, "c", Arc::new(|| Duration::ZERO));
        model.tick(secs(0));
        assert_eq!(model.serving(2), (0, false));
        model.join(2, secs(1));
        model.join(3, secs(1));
        model.tick(secs(1));
        assert!(fenced(&model, 2) && fenced(&model, 3));
        model.tick(secs(3));
        assert!(!fenced(&model, 2) && !fenced(&model, 3));
        assert!(model.serving(3).1);
        for part in [Part::Txn(0), Part::Txn(2), Part::Topic(1)] {
            assert_eq!(model.replicas(part), [1]);
            model.elect_preferred();
            assert_eq!(isr(&model, part), (1, 0, vec![1], vec![]));
        }
    }
}
