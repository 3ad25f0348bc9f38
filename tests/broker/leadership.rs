//! The leader-election client against a real broker (lease 2 s, renew
//! 500 ms, stagger 500 ms).

use std::sync::Arc;
use std::time::Duration;

use krabka_authority::coordination::RoleState;
use krabka_authority::kafka::KafkaTransport;
use krabka_authority::leadership::{Leadership, acquire, describe_leadership, describe_role_state};
use tokio::time::Instant;

use crate::support::broker::{topic, transport};
use crate::support::leadership::{Pending, candidate, fast_options};
use crate::support::{eventually, unique};

async fn roster(topic: &str, role: &str) -> RoleState {
    describe_role_state(&transport(topic).await, role)
        .await
        .unwrap()
}

/// Starts three members one after another, each once the one before has
/// registered (each registers in a task of its own, so starting them back to
/// back let c register before b now and then); returns the holder and the
/// two waiting, in registration order.
async fn three(topic: &str, role: &str) -> (Leadership<KafkaTransport>, Pending, Pending) {
    let registered = |n: usize| {
        eventually(
            move || async move { (roster(topic, role).await.members().len() == n).then_some(()) },
        )
    };
    let a = candidate(topic, role, "a").await;
    let a = tokio::time::timeout(Duration::from_secs(20), a)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let b = candidate(topic, role, "b").await;
    registered(2).await;
    let c = candidate(topic, role, "c").await;
    registered(3).await;
    (a, b, c)
}

#[tokio::test]
async fn three_members_give_one_holder() {
    let topic = topic(3).await;
    let role = unique("one-holder");
    let members = ["a", "b", "c"];
    let mut pending = Vec::new();
    for m in members {
        pending.push(candidate(&topic, &role, m).await);
    }
    let started = Instant::now();
    let holder = loop {
        if let Some(i) = pending.iter().position(|p| p.is_finished()) {
            break pending.remove(i).await.unwrap().unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "nobody acquired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Two more lease durations: the holder renews, nobody else takes over.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        pending.iter().all(|p| !p.is_finished()),
        "a second holder appeared"
    );
    assert!(holder.err().is_none());
    let status = describe_leadership(&transport(&topic).await, &role)
        .await
        .unwrap();
    assert!(status.authoritative(&holder.token()));
    let state = eventually(|| async {
        let state = roster(&topic, &role).await;
        state
            .lease()
            .is_some_and(|l| l.token == holder.token())
            .then_some(state)
    })
    .await;
    assert_eq!(state.lease().unwrap().member, holder.member());
    assert_eq!(state.lease().unwrap().token, holder.token());
    assert_eq!(state.members().len(), 3);
    for p in pending {
        p.abort();
    }
}

#[tokio::test]
async fn a_silent_holder_is_replaced_by_the_next_in_rank_after_its_deadline() {
    let topic = topic(3).await;
    let role = unique("silent");
    let (a, b, c) = three(&topic, &role).await;
    let old = a.token();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deadline = roster(&topic, &role).await.lease().unwrap().deadline;
    drop(a); // renewals stop; no resign
    let Ok(b) = tokio::time::timeout(Duration::from_secs(10), b).await else {
        panic!(
            "b did not take over within 10 s; the roster: {:?}",
            roster(&topic, &role).await
        );
    };
    let b = b.unwrap().unwrap();
    let lease = eventually(|| async {
        roster(&topic, &role)
            .await
            .lease()
            .filter(|l| l.token == b.token())
            .cloned()
    })
    .await;
    assert_eq!(lease.member, "b", "rank 0 of the challengers");
    assert_eq!(lease.token, b.token());
    assert!(b.token().supersedes(&old));
    assert!(
        lease.granted_at >= deadline,
        "not before the deadline: {} < {deadline}",
        lease.granted_at
    );
    let late = lease.granted_at - deadline;
    assert!(late <= 500 + 700, "took {late} ms past the deadline");
    eprintln!("silent holder: b took over {late} ms after the deadline");
    assert!(!c.is_finished());
    c.abort();
}

#[tokio::test]
async fn a_resign_hands_over_within_about_one_stagger() {
    let topic = topic(3).await;
    let role = unique("resign");
    let (a, b, c) = three(&topic, &role).await;
    let old = a.token();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    a.resign().await.unwrap();
    let b = tokio::time::timeout(Duration::from_secs(5), b)
        .await
        .expect("b takes over")
        .unwrap()
        .unwrap();
    let took = started.elapsed();
    eprintln!("resign: b took over in {took:?}");
    assert!(
        took < Duration::from_millis(500 + 700),
        "hand-over took {took:?}"
    );
    assert!(b.token().supersedes(&old));
    let state = eventually(|| async {
        let state = roster(&topic, &role).await;
        state
            .lease()
            .is_some_and(|l| l.token == b.token())
            .then_some(state)
    })
    .await;
    assert_eq!(state.rank_of("a"), None, "the resigned member deregistered");
    assert_eq!(state.lease().unwrap().member, "b");
    assert!(!c.is_finished());
    c.abort();
}

#[tokio::test]
async fn a_lease_longer_than_the_broker_allows_is_refused() {
    let topic = topic(3).await;
    let t = Arc::new(transport(&topic).await);
    let too_long = fast_options()
        .with_lease_duration(Duration::from_secs(16 * 60))
        .with_renew_interval(Duration::from_secs(60));
    let err = acquire(t.clone(), &unique("long"), "a", too_long)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("transaction.max.timeout.ms"),
        "{err}"
    );
    let wrong = fast_options().with_partitions(16);
    let err = acquire(t, &unique("parts"), "a", wrong).await.unwrap_err();
    assert!(err.to_string().contains("topic has 3"), "{err}");
}
