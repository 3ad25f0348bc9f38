//! The split-brain check: 50 forced failovers (silent holders that keep
//! writing as zombies, resigns, restarts) while every believed holder writes
//! guarded records to a separate topic under its token. The broker must
//! accept no write of a token older than the coordinator's current one, and
//! describe must never call two members' tokens authoritative at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use krabka_authority::coordination::FencingToken;
use krabka_authority::kafka::{GuardedRecord, KafkaTransport};
use krabka_authority::leadership::{Options, acquire};
use krabka_authority::transport::{Coordinator, TransportError};
use rand::RngExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::support::broker::{client, topic, transport};
use crate::support::{eventually, unique};

const FAILOVERS: usize = 50;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Renewals stop but the member keeps writing until the broker fences it.
    Kill,
    /// The member resigns.
    Resign,
}

#[derive(Debug)]
struct Belief {
    member: usize,
    token: FencingToken,
    until: Option<Instant>,
}

#[derive(Default)]
struct Record {
    beliefs: Vec<Belief>,
    zombie_rejections: usize,
    accepted: usize,
    /// Writes whose outcome the client could not know; each ends the
    /// member's holding (the session cannot write again).
    uncertain: usize,
}

fn options() -> Options {
    Options::default()
        .with_lease_duration(Duration::from_millis(1500))
        .with_renew_interval(Duration::from_millis(300))
        .with_challenge_stagger(Duration::from_millis(300))
}

async fn member(
    id: usize,
    t: Arc<KafkaTransport>,
    role: String,
    guarded: String,
    mut commands: mpsc::UnboundedReceiver<Action>,
    acquired: mpsc::UnboundedSender<(usize, FencingToken, Instant)>,
    record: Arc<Mutex<Record>>,
) {
    let name = format!("m{id}");
    let mut seq = 0u64;
    loop {
        // Stale commands were meant for an earlier holding.
        while commands.try_recv().is_ok() {}
        let leadership = match acquire(t.clone(), &role, &name, options()).await {
            Ok(l) => l,
            Err(e) => panic!("{name}: acquire failed: {e}"),
        };
        let token = leadership.token();
        let belief = {
            let mut r = record.lock().unwrap();
            r.beliefs.push(Belief {
                member: id,
                token,
                until: None,
            });
            r.beliefs.len() - 1
        };
        let _ = acquired.send((id, token, Instant::now()));
        let mut leadership = Some(leadership);
        let mut zombie = false;
        loop {
            let fenced = async {
                match &leadership {
                    Some(l) => l.done().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                cmd = commands.recv() => match cmd {
                    Some(Action::Kill) => {
                        zombie = true;
                        drop(leadership.take());
                    }
                    Some(Action::Resign) => {
                        if let Some(l) = leadership.take() {
                            let _ = l.resign().await;
                        }
                        break;
                    }
                    None => return,
                },
                () = fenced => break,
                () = tokio::time::sleep(Duration::from_millis(40)) => {
                    seq += 1;
                    let value = format!("{name}|{token}|{seq}");
                    let write = GuardedRecord {
                        topic: guarded.clone(),
                        partition: 0,
                        key: Bytes::from(format!("{name}-{seq}")),
                        value: Some(Bytes::from(value)),
                        timestamp_ms: 0,
                    };
                    match t.write_guarded(&role, token, &[write]).await {
                        Ok(_) => record.lock().unwrap().accepted += 1,
                        Err(TransportError::Fenced { .. }) => {
                            if zombie {
                                record.lock().unwrap().zombie_rejections += 1;
                            }
                            break;
                        }
                        // The token cannot write again (the session's sequence
                        // or transaction state is unknown): like the leadership
                        // client, give the holding up and compete anew. A
                        // zombie's commit racing the successor's fence gets
                        // this (EndTxn UNKNOWN_SERVER_ERROR from the broker).
                        Err(e @ TransportError::Uncertain { .. }) => {
                            eprintln!("{name}: guarded write uncertain, competing anew: {e}");
                            record.lock().unwrap().uncertain += 1;
                            break;
                        }
                        Err(e) => eprintln!("{name}: guarded write failed: {e}"),
                    }
                }
            }
        }
        record.lock().unwrap().beliefs[belief].until = Some(Instant::now());
        drop(leadership);
        let pause = rand::rng().random_range(0..300);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_write_of_a_deposed_token_is_ever_accepted() {
    let coordination = topic(3).await;
    let guarded = topic(1).await;
    let role = unique("split");
    let record = Arc::new(Mutex::new(Record::default()));
    let (acquired_tx, mut acquired) = mpsc::unbounded_channel();
    let mut commands = Vec::new();
    let mut tasks = Vec::new();
    for id in 0..3 {
        let (tx, rx) = mpsc::unbounded_channel();
        commands.push(tx);
        let t = Arc::new(transport(&coordination).await);
        tasks.push(tokio::spawn(member(
            id,
            t,
            role.clone(),
            guarded.clone(),
            rx,
            acquired_tx.clone(),
            record.clone(),
        )));
    }

    // Describe, all along: at most one believed holder is authoritative.
    // Its verdict is the task's result, awaited at the end (a panic in a
    // task that is only aborted is never seen).
    let (stop_checker, checker_stopped) = tokio::sync::watch::channel(false);
    let checker = {
        let record = record.clone();
        let role = role.clone();
        let t = transport(&coordination).await;
        tokio::spawn(async move {
            let mut samples = 0usize;
            while !*checker_stopped.borrow() {
                if let Ok(Some(current)) = t.describe(&role).await {
                    let r = record.lock().unwrap();
                    let authoritative: HashSet<usize> = r
                        .beliefs
                        .iter()
                        .filter(|b| b.until.is_none() && b.token == current)
                        .map(|b| b.member)
                        .collect();
                    assert!(
                        authoritative.len() <= 1,
                        "two authoritative holders: {authoritative:?}"
                    );
                    samples += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            samples
        })
    };

    let mut minted = Vec::new();
    let mut kill_times = Vec::new();
    let mut resign_times = Vec::new();
    let mut last_action: Option<(Action, Instant)> = None;
    for i in 0..=FAILOVERS {
        let (holder, token, at) = tokio::time::timeout(Duration::from_secs(30), acquired.recv())
            .await
            .unwrap_or_else(|_| panic!("no takeover after failover {i}"))
            .expect("members run");
        if let Some(prev) = minted.last() {
            assert!(token > *prev, "tokens only grow: {token} after {prev}");
        }
        minted.push(token);
        if let Some((action, since)) = last_action {
            let took = at.duration_since(since);
            match action {
                Action::Kill => kill_times.push(took),
                Action::Resign => resign_times.push(took),
            }
        }
        if i == FAILOVERS {
            break;
        }
        let hold = rand::rng().random_range(200..600);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let action = if rand::rng().random_bool(0.5) {
            Action::Kill
        } else {
            Action::Resign
        };
        last_action = Some((action, Instant::now()));
        commands[holder].send(action).unwrap();
    }
    for task in &tasks {
        task.abort();
    }
    stop_checker.send(true).unwrap();
    let samples = checker
        .await
        .expect("at most one authoritative holder at any time");
    assert!(samples > FAILOVERS, "{samples} describes of the role");

    // Every committed guarded record, in offset order; every accepted write
    // is there (commit markers may land a moment after EndTxn answers), and
    // nothing else but what a write of unknown outcome may have committed.
    let (accepted, uncertain) = {
        let r = record.lock().unwrap();
        (r.accepted, r.uncertain)
    };
    let kafka = client();
    let read = eventually(|| async {
        let read = kafka.reader().read_committed(&guarded, 0, 0).await.unwrap();
        (read.records.len() >= accepted).then_some(read)
    })
    .await;
    assert!(
        read.records.len() <= accepted + uncertain,
        "every accepted write is committed, none extra: {} read, {accepted} accepted, {uncertain} uncertain",
        read.records.len()
    );
    let mut previous = FencingToken::NO_EPOCH;
    let minted_set: HashSet<FencingToken> = minted.iter().copied().collect();
    for r in &read.records {
        let value = String::from_utf8(r.value.as_ref().unwrap().to_vec()).unwrap();
        let token: FencingToken = value.split('|').nth(1).unwrap().parse().unwrap();
        assert!(
            token >= previous,
            "offset {}: a write under {token} was accepted after one under {previous}",
            r.offset
        );
        assert!(
            minted_set.contains(&token) || token > *minted.last().unwrap(),
            "unknown token {token}"
        );
        previous = token;
    }
    let r = record.lock().unwrap();
    kill_times.sort();
    resign_times.sort();
    eprintln!(
        "split brain: {FAILOVERS} failovers, {} guarded writes accepted ({} read back), {} zombie writes rejected, {} of unknown outcome",
        r.accepted,
        read.records.len(),
        r.zombie_rejections,
        r.uncertain
    );
    eprintln!(
        "failover after a silent holder (lease 1.5 s): n={} median {:?} max {:?}",
        kill_times.len(),
        percentile(&kill_times, 0.5),
        kill_times.last().copied().unwrap_or_default()
    );
    eprintln!(
        "failover after a resign: n={} median {:?} max {:?}",
        resign_times.len(),
        percentile(&resign_times, 0.5),
        resign_times.last().copied().unwrap_or_default()
    );
    assert!(
        kill_times.is_empty() || r.zombie_rejections > 0,
        "silent holders kept writing and the broker rejected none"
    );
    assert!(percentile(&kill_times, 0.5) < Duration::from_millis(1500 + 300 + 1000));
}
