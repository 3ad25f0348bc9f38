//! The client's rules with the in-memory cluster and a manual clock: every
//! instant is explicit. The same behaviours are shown against a real broker
//! in `tests/broker/leadership.rs`.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use krabka_coordination::RoleState;
use krabka_coordination::testkit::{T0, lease_at};
use krabka_coordination::time::ManualClock;
use krabka_coordination::transport::memory::{MemoryCluster, MemoryTransport};
use krabka_coordination::transport::{LeaseWriter, Registrar};

const LEASE_MS: i64 = 30_000;
const STAGGER_MS: i64 = 5_000;
const ROLE: &str = "orders";

fn options(clock: &ManualClock) -> Options {
    Options::default()
        .with_lease_duration(Duration::from_millis(LEASE_MS as u64))
        .with_renew_interval(Duration::from_secs(10))
        .with_challenge_stagger(Duration::from_millis(STAGGER_MS as u64))
        .with_clock(Arc::new(clock.clone()))
}

type Handle = tokio::task::JoinHandle<Result<Leadership<MemoryTransport>, LeadershipError>>;

fn spawn(cluster: &MemoryCluster, member: &str, clock: &ManualClock) -> Handle {
    let transport = Arc::new(cluster.transport());
    let member = member.to_owned();
    let options = options(clock);
    tokio::spawn(async move { acquire(transport, ROLE, &member, options).await })
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
}

fn state(cluster: &MemoryCluster) -> RoleState {
    let partition = krabka_coordination::role_partition(ROLE, 4).unwrap();
    RoleState::from_records(ROLE, &cluster.log(partition))
}

async fn holder(
    cluster: &MemoryCluster,
    member: &str,
    clock: &ManualClock,
) -> Leadership<MemoryTransport> {
    let leadership = spawn(cluster, member, clock).await.unwrap().unwrap();
    assert_eq!(state(cluster).lease().unwrap().member, member);
    leadership
}

#[tokio::test]
async fn rank_n_challenges_at_deadline_plus_n_staggers() {
    for n in 0..3i64 {
        let clock = ManualClock::new(T0);
        let cluster = MemoryCluster::new(4);
        let a = holder(&cluster, "a", &clock).await;
        let deadline = T0 + LEASE_MS;
        drop(a); // the holder dies: no more renewals
        // n registered members that never run rank ahead of the live one.
        let dead = cluster.transport();
        for i in 0..n {
            dead.register(ROLE, &format!("dead-{i}"), T0).await.unwrap();
        }
        let live = spawn(&cluster, "live", &clock);
        clock.wait_for_sleepers(1).await;
        let turn = deadline + n * STAGGER_MS;

        clock.set(turn - 1);
        settle().await;
        clock.wait_for_sleepers(1).await;
        assert!(!live.is_finished(), "rank {n} challenged before {turn}");
        assert_eq!(state(&cluster).lease().unwrap().member, "a");

        clock.set(turn);
        let won = live.await.unwrap().unwrap();
        let lease = state(&cluster).lease().cloned().unwrap();
        assert_eq!(lease.member, "live");
        assert_eq!(
            lease.granted_at, turn,
            "rank {n} challenges exactly at its instant"
        );
        assert_eq!(lease.token, won.token());
    }
}

#[tokio::test]
async fn a_recovered_member_lands_at_the_tail() {
    let clock = ManualClock::new(T0);
    let cluster = MemoryCluster::new(4);
    let a = holder(&cluster, "a", &clock).await;
    let b = spawn(&cluster, "b", &clock);
    let c = spawn(&cluster, "c", &clock);
    clock.wait_for_sleepers(2).await;
    drop(a);
    clock.set(T0 + LEASE_MS);
    let b = b.await.unwrap().unwrap();
    assert_eq!(state(&cluster).lease().unwrap().member, "b");

    // a comes back and registers again: behind c.
    let a_again = spawn(&cluster, "a", &clock);
    settle().await;
    clock.wait_for_sleepers(2).await;
    let roster: Vec<String> = state(&cluster)
        .members()
        .iter()
        .map(|m| m.member.clone())
        .collect();
    assert_eq!(roster, ["b", "c", "a"]);

    drop(b);
    let b_deadline = T0 + LEASE_MS + LEASE_MS;
    clock.set(b_deadline);
    let c = c.await.unwrap().unwrap();
    assert_eq!(
        state(&cluster).lease().unwrap().member,
        "c",
        "no failback to a"
    );
    assert!(!a_again.is_finished());
    assert_eq!(cluster.current(ROLE), Some(c.token()));
    a_again.abort();
}

#[tokio::test]
async fn a_resign_lets_rank_zero_take_over_at_once() {
    let clock = ManualClock::new(T0);
    let cluster = MemoryCluster::new(4);
    let a = holder(&cluster, "a", &clock).await;
    let b = spawn(&cluster, "b", &clock);
    let c = spawn(&cluster, "c", &clock);
    clock.wait_for_sleepers(3).await; // b, c and a's renewal
    clock.advance(Duration::from_secs(1));
    settle().await;
    clock.wait_for_sleepers(3).await;

    a.resign().await.unwrap();
    let after_resign = state(&cluster);
    assert!(after_resign.lease().is_none());
    assert_eq!(after_resign.rank_of("a"), None, "deregistered");

    // One poll interval later (not the 30 s deadline), b holds.
    clock.advance(
        Options::default()
            .with_renew_interval(Duration::from_secs(10))
            .with_challenge_stagger(Duration::from_secs(5))
            .poll(),
    );
    let b = b.await.unwrap().unwrap();
    let lease = state(&cluster).lease().cloned().unwrap();
    assert_eq!(lease.member, "b");
    assert!(lease.granted_at < T0 + LEASE_MS);
    assert_eq!(cluster.current(ROLE), Some(b.token()));
    settle().await;
    assert!(!c.is_finished(), "c waits for b's lease");
    c.abort();
}

#[tokio::test]
async fn a_fenced_holder_ends_with_fenced_and_stops_renewing() {
    let clock = ManualClock::new(T0);
    let cluster = MemoryCluster::new(4);
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = events.clone();
    let transport = Arc::new(cluster.transport());
    let a = acquire(
        transport,
        ROLE,
        "a",
        options(&clock).with_events(Arc::new(move |e: &Event| {
            sink.lock().unwrap().push(e.clone())
        })),
    )
    .await
    .unwrap();
    let token = a.token();
    clock.wait_for_sleepers(1).await;
    clock.advance(Duration::from_secs(10));
    settle().await;
    clock.wait_for_sleepers(1).await;
    assert!(
        a.err().is_none(),
        "a renewal under the current token succeeds"
    );
    let leases_before = lease_records(&cluster);

    // The coordinator fences the epoch (a transaction timeout would).
    cluster.fence(ROLE).unwrap();
    clock.advance(Duration::from_secs(10));
    tokio::time::timeout(Duration::from_secs(5), a.done())
        .await
        .expect("done fires");
    let err = a.err().unwrap();
    assert!(err.is_fenced(), "{err}");
    assert!(matches!(err, LeadershipError::Fenced { token: t, .. } if t == token));

    clock.advance(Duration::from_secs(60));
    settle().await;
    assert_eq!(
        lease_records(&cluster),
        leases_before,
        "no write after the fence"
    );
    let seen = events.lock().unwrap().clone();
    assert!(seen.contains(&Event::Acquired { token }));
    assert!(seen.contains(&Event::Fenced { token }));
    assert_eq!(
        seen.iter()
            .filter(|e| matches!(e, Event::Renewed { .. }))
            .count(),
        2
    );
}

fn lease_records(cluster: &MemoryCluster) -> usize {
    let partition = krabka_coordination::role_partition(ROLE, 4).unwrap();
    cluster
        .log(partition)
        .iter()
        .filter(|r| {
            krabka_coordination::decode_key(&r.key)
                .is_ok_and(|k| k.kind == krabka_coordination::KeyKind::Lease)
        })
        .count()
}

#[tokio::test]
async fn dropping_the_handle_stops_renewals_and_reports_released() {
    let clock = ManualClock::new(T0);
    let cluster = MemoryCluster::new(4);
    let a = holder(&cluster, "a", &clock).await;
    let observer = a.ended.clone();
    drop(a);
    settle().await;
    assert!(matches!(
        &*observer.borrow(),
        Some(LeadershipError::Released { .. })
    ));
    let before = lease_records(&cluster);
    clock.advance(Duration::from_secs(60));
    settle().await;
    assert_eq!(lease_records(&cluster), before);
}

#[tokio::test]
async fn invalid_options_are_refused_before_registering() {
    let clock = ManualClock::new(T0);
    let cluster = MemoryCluster::new(4);
    let t = Arc::new(cluster.transport());
    let bad = [
        options(&clock).with_renew_interval(Duration::from_secs(30)),
        options(&clock).with_partitions(16),
        options(&clock).with_lease_duration(Duration::from_secs(901)),
    ];
    for o in bad {
        let err = acquire(t.clone(), ROLE, "a", o).await.unwrap_err();
        assert!(matches!(err, LeadershipError::InvalidOptions(_)), "{err}");
    }
    assert!(state(&cluster).members().is_empty());
}

#[tokio::test]
async fn describe_leadership_names_only_the_current_token() {
    let clock = ManualClock::new(T0);
    let cluster = MemoryCluster::new(4);
    let t = cluster.transport();
    assert_eq!(describe_leadership(&t, ROLE).await.unwrap().current, None);
    let a = holder(&cluster, "a", &clock).await;
    let status = describe_leadership(&t, ROLE).await.unwrap();
    assert!(status.authoritative(&a.token()));
    assert!(!status.authoritative(&krabka_coordination::FencingToken::NO_EPOCH));
    let newer = cluster.transport();
    let token = krabka_coordination::transport::Coordinator::acquire_epoch(
        &newer,
        ROLE,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    newer
        .write_lease(ROLE, token, &lease_at("z", token, T0, T0 + 1))
        .await
        .unwrap();
    let status = describe_leadership(&t, ROLE).await.unwrap();
    assert!(!status.authoritative(&a.token()));
    assert!(status.authoritative(&token));
    let roster = describe_role_state(&t, ROLE).await.unwrap();
    assert_eq!(roster.lease().unwrap().member, "z");
}
