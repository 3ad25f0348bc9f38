use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::observe::Outcome;

#[derive(Debug, Default)]
struct Changes(AtomicUsize);

impl RequestObserver for Changes {
    fn observe(&self, _: &'static str, _: Outcome, _: Duration) {}
    fn cluster_changed(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn broker(addr: &str) -> Broker {
    Broker {
        id: 1,
        addr: addr.to_owned(),
    }
}

fn state() -> ClusterState {
    ClusterState::new(&ClientConfig::new(["b:1"]))
}

fn answer(cluster: &str) -> MetadataAnswer {
    MetadataAnswer::of_t(cluster, &[(1, "b:1")], &[])
}

/// `answer` as broker `from` gave it, asked now.
fn learn_metadata(state: &ClusterState, from: &str, answer: MetadataAnswer) {
    state.learn(Lesson::Metadata {
        answer,
        from,
        sent: krabka_coordination::time::boot_now(),
        alone: false,
    });
}

/// An answer of cluster "a" listing brokers 1-3 (`b:<id>`) and topic
/// "t" with `partitions` as (index, leader, epoch).
fn led(partitions: &[(i32, i32, i32)]) -> MetadataAnswer {
    MetadataAnswer::of_t("a", &[(1, "b:1"), (2, "b:2"), (3, "b:3")], partitions)
}

#[tokio::test]
async fn another_cluster_id_forgets_what_was_learned_of_the_old_one() {
    let changes = Arc::new(Changes::default());
    let mut config = ClientConfig::new(["b:1"]);
    config.observer = Some(changes.clone());
    let state = ClusterState::new(&config);
    learn_metadata(&state, "b:1", answer("a"));
    let b1 = broker("b:1");
    state.learn(Lesson::CoordinatorFound {
        key: "r",
        broker: &b1,
    });
    learn_metadata(&state, "b:1", answer("a"));
    state.learn(Lesson::ClusterId {
        addr: "b:1",
        id: Some("a".into()),
    });
    assert_eq!(changes.0.load(Ordering::SeqCst), 0);
    assert!(state.coordinators.weighted_size() > 0);

    // A new connection's first answer names another cluster.
    state.learn(Lesson::ClusterId {
        addr: "b:1",
        id: Some("b".into()),
    });
    assert_eq!(changes.0.load(Ordering::SeqCst), 1, "counted once");
    assert_eq!(state.coordinators.weighted_size(), 0, "its coordinators");
    assert!(state.metadata.topic("t").is_none(), "its topics");
    learn_metadata(&state, "b:1", answer("b"));
    assert_eq!(changes.0.load(Ordering::SeqCst), 1);
    learn_metadata(&state, "b:1", answer("a"));
    assert_eq!(changes.0.load(Ordering::SeqCst), 2, "and back");
}

#[tokio::test(start_paused = true)]
async fn a_broker_behind_another_is_asked_nothing_until_it_catches_up() {
    let state = state();
    learn_metadata(&state, "b:2", led(&[(0, 1, 4)]));
    let b1 = broker("b:1");
    state.learn(Lesson::CoordinatorFound {
        key: "r",
        broker: &b1,
    });
    // Broker 2 learns that broker 3 leads now: broker 1 was deposed.
    learn_metadata(&state, "b:2", led(&[(0, 3, 5)]));
    assert!(state.epochs.is_stale("b:1"));
    assert!(state.coordinators.is_suspect("b:1"), "its coordinators");
    tokio::time::advance(Duration::from_secs(1)).await;
    // Broker 1, cut off, still names itself: its answer is not used.
    learn_metadata(&state, "b:1", led(&[(0, 1, 4)]));
    let p = &state.metadata.topic("t").unwrap().partitions[0];
    assert_eq!((p.leader, p.leader_epoch), (3, 5));
    assert!(state.epochs.is_stale("b:1"));
    // Caught up.
    learn_metadata(&state, "b:1", led(&[(0, 3, 5)]));
    assert!(!state.epochs.is_stale("b:1"));
    // Another cluster forgets the epochs: its lower ones are current.
    state.learn(Lesson::ClusterId {
        addr: "b:2",
        id: Some("z".into()),
    });
    let mut fresh = led(&[(0, 1, 0)]);
    fresh.cluster_id = Some("z".into());
    learn_metadata(&state, "b:1", fresh);
    assert!(!state.epochs.is_stale("b:1"));
    let p = &state.metadata.topic("t").unwrap().partitions[0];
    assert_eq!((p.leader, p.leader_epoch), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_broken_broker_backs_off_and_is_suspect_until_it_answers() {
    let state = state();
    let refused = KafkaError::Connect {
        addr: "b:1".into(),
        reason: "Connection refused (os error 111)".into(),
    };
    state.learn(Lesson::CannotConnect {
        addr: "b:1",
        error: &refused,
    });
    let blocked = state.nodes.blocked("b:1").expect("backs off");
    assert_eq!(blocked.reason, "Connection refused (os error 111)");
    assert!(state.coordinators.is_suspect("b:1"));
    state.learn(Lesson::Answered { addr: "b:1" });
    assert!(state.nodes.blocked("b:1").is_none());
    assert!(!state.coordinators.is_suspect("b:1"), "trusted again");

    let timeout = KafkaError::Timeout {
        api: "Metadata",
        addr: "b:2".into(),
        after: Duration::from_secs(5),
    };
    state.learn(Lesson::ConnectionLost {
        addr: "b:2",
        error: &timeout,
    });
    assert!(state.nodes.is_blocked("b:2") && state.coordinators.is_suspect("b:2"));
}

#[tokio::test]
async fn a_refused_set_up_breaks_nothing() {
    let state = state();
    let tls = KafkaError::Tls("handshake with b:1 failed: UnknownIssuer".into());
    state.learn(Lesson::CannotConnect {
        addr: "b:1",
        error: &tls,
    });
    assert!(!state.nodes.is_blocked("b:1"));
    assert!(!state.coordinators.is_suspect("b:1"));
    assert_eq!(
        state.nodes.succeeded("b:1"),
        Some(0),
        "but it is remembered"
    );
}

#[tokio::test]
async fn not_coordinator_suspects_the_broker_and_other_describe_errors_do_not() {
    let state = state();
    for (code, suspect) in [(51, false), (14, false), (16, true)] {
        let error = KafkaError::broker("DescribeTransactions", code, None);
        state.learn(Lesson::DescribeFailed {
            addr: "b:1",
            error: &error,
        });
        assert_eq!(state.coordinators.is_suspect("b:1"), suspect, "{code}");
    }
}

#[tokio::test]
async fn a_transactional_request_forgets_its_coordinator_only_when_it_may_have_moved() {
    let state = state();
    let b1 = broker("b:1");
    let closed = KafkaError::ConnectionClosed {
        addr: "b:1".into(),
        reason: "reset".into(),
    };
    let cases = [
        (KafkaError::broker("EndTxn", 51, None), false),
        (KafkaError::broker("EndTxn", 47, None), false),
        (KafkaError::broker("EndTxn", 14, None), true),
        (KafkaError::broker("EndTxn", 16, None), true),
        (closed, true),
    ];
    for (error, forgets) in cases {
        state.learn(Lesson::CoordinatorFound {
            key: "r",
            broker: &b1,
        });
        state.learn(Lesson::TxnFailed {
            key: "r",
            error: &error,
        });
        assert_eq!(state.coordinators.cached("r").is_none(), forgets, "{error}");
    }
}

#[tokio::test]
async fn a_stale_answer_forgets_the_id_and_suspects_its_broker() {
    let state = state();
    let b1 = broker("b:1");
    state.learn(Lesson::CoordinatorFound {
        key: "r",
        broker: &b1,
    });
    state.learn(Lesson::BelowHighWater {
        key: "r",
        addr: "b:1",
    });
    assert!(state.coordinators.cached("r").is_none());
    assert!(state.coordinators.is_suspect("b:1"));
    state.learn(Lesson::Confirmed { addr: "b:1" });
    assert!(!state.coordinators.is_suspect("b:1"));
}

#[tokio::test]
async fn only_leader_errors_and_disconnects_send_a_topic_back_to_metadata() {
    let state = state();
    for (error, refresh) in [
        (KafkaError::broker("Fetch", 74, None), true),
        (KafkaError::broker("Fetch", 1, None), false),
    ] {
        learn_metadata(&state, "b:1", answer("a"));
        state.learn(Lesson::PartitionError {
            topic: "t",
            addr: "b:1",
            error: &error,
        });
        assert_eq!(state.metadata.topic("t").is_none(), refresh, "{error}");
    }
}

/// A broker whose process disagrees with the leader epoch the client knows
/// (a replaced process behind a moved address, cut off and answering from
/// memory) gets new connections; an error of another kind does not.
#[tokio::test(start_paused = true)]
async fn a_leader_epoch_a_broker_disagrees_with_gives_up_its_connections() {
    let state = state();
    let opened = Instant::now();
    tokio::time::advance(std::time::Duration::from_millis(1)).await;
    for (code, given_up) in [(1, false), (74, true), (75, true)] {
        let addr = format!("b:{code}");
        state.learn(Lesson::PartitionError {
            topic: "t",
            addr: &addr,
            error: &KafkaError::broker("Fetch", code, None),
        });
        assert_eq!(state.nodes.given_up(&addr, opened), given_up, "{code}");
    }
}
