//! The seed's claims, shown against a real broker: the quorum mints the
//! epoch, the broker rejects a superseded epoch, an aborted lease write stays
//! invisible.

use std::time::Duration;

use bytes::Bytes;
use krabka_authority::coordination::{
    FencingToken, Key, Lease, RoleState, decode_key, encode_key, encode_lease, role_partition,
};
use krabka_authority::kafka::{ClientConfig, KafkaClient, KafkaError, TxnError};
use krabka_authority::transport::{
    Coordinator, LeaseWriter, Registrar, StateReader, Transport, TransportError,
};
use tokio::time::Instant;

use crate::support::broker::{OwnBroker, client, config_for, role_in, topic, transport};
use crate::support::{eventually, unique};

const LEASE: Duration = Duration::from_secs(10);

fn lease(member: &str, token: FencingToken, at: i64) -> Lease {
    Lease {
        member: member.into(),
        token,
        granted_at: at,
        deadline: at + 10_000,
    }
}

fn lease_bytes(member: &str, token: FencingToken) -> (Bytes, Bytes) {
    (
        Bytes::new(),
        Bytes::from(encode_lease(&lease(member, token, 1)).unwrap()),
    )
}

#[tokio::test]
async fn describe_tracks_the_minted_token_and_a_superseded_write_is_fenced() {
    let topic = topic(3).await;
    let (a, b) = (transport(&topic).await, transport(&topic).await);
    let role = unique("role");

    assert_eq!(
        a.describe(&role).await.unwrap(),
        None,
        "never taken: no holder"
    );
    let t1 = a.acquire_epoch(&role, LEASE).await.unwrap();
    assert_eq!(
        b.describe(&role).await.unwrap(),
        Some(t1),
        "exactly the minted token"
    );
    a.write_lease(&role, t1, &lease("a", t1, 1)).await.unwrap();

    let t2 = b.acquire_epoch(&role, LEASE).await.unwrap();
    assert!(t2.supersedes(&t1), "{t2} supersedes {t1}");
    assert_eq!(a.describe(&role).await.unwrap(), Some(t2));
    let err = a
        .write_lease(&role, t1, &lease("a", t1, 2))
        .await
        .unwrap_err();
    assert!(err.is_fenced(), "the broker rejects the old epoch: {err}");

    // A token this transport never minted is an error, not a fence.
    let err = b
        .write_lease(&role, t1, &lease("b", t1, 3))
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::NotMinted { .. }), "{err}");

    b.write_lease(&role, t2, &lease("b", t2, 4)).await.unwrap();
    // Commit markers land a moment after EndTxn answers.
    let held = eventually(|| async {
        let state = RoleState::from_records(&role, &a.read_role_records(&role).await.unwrap());
        state.lease().filter(|l| l.member == "b").cloned()
    })
    .await;
    assert_eq!(held.token, t2);
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn racing_acquires_leave_exactly_one_current_token() {
    let topic = topic(1).await;
    let (a, b) = (transport(&topic).await, transport(&topic).await);
    let role = unique("race");
    let mut last = FencingToken::NO_EPOCH;
    for round in 0..50 {
        let (ta, tb) = tokio::join!(a.acquire_epoch(&role, LEASE), b.acquire_epoch(&role, LEASE));
        let (ta, tb) = (ta.unwrap(), tb.unwrap());
        assert_ne!(
            ta, tb,
            "round {round}: the coordinator never mints one pair twice"
        );
        let current = b.describe(&role).await.unwrap().expect("held");
        assert_eq!(
            current,
            ta.max(tb),
            "round {round}: the later mint is current"
        );
        assert!(current.supersedes(&last), "round {round}: tokens only grow");
        last = current;

        let (la, lb) = (lease("a", ta, round), lease("b", tb, round));
        let (wa, wb) = tokio::join!(a.write_lease(&role, ta, &la), b.write_lease(&role, tb, &lb));
        let (winner, loser) = if ta == current { (wa, wb) } else { (wb, wa) };
        winner.unwrap_or_else(|e| panic!("round {round}: current token rejected: {e}"));
        let err = loser.expect_err("the broker rejects the older token");
        assert!(err.is_fenced(), "round {round}: {err}");
    }
    eventually(|| async {
        let state = RoleState::from_records(&role, &a.read_role_records(&role).await.unwrap());
        (state.lease().map(|l| l.token) == Some(last)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_kafka_4_cluster_runs_transaction_version_2() {
    let version = std::env::var("KRABKA_KAFKA_VERSION").unwrap_or_else(|_| "4.1.1".into());
    let tv = client()
        .metadata()
        .finalized_feature("transaction.version")
        .await
        .unwrap();
    if version.starts_with("3.") {
        eprintln!("skipped: Kafka {version} has no transaction version 2 (found {tv:?})");
        assert_eq!(tv, None, "Kafka 3.x finalizes no transaction.version");
        return;
    }
    assert_eq!(
        tv,
        Some(2),
        "a fresh Kafka 4.x cluster finalizes transaction.version=2"
    );
}

#[tokio::test]
async fn renewals_under_transaction_version_1_keep_the_token() {
    let topic = topic(2).await;
    let t = transport(&topic).await;
    // On 4.x the cluster finalized transaction version 2, under which every
    // commit would bump the epoch: the pinned version 1 requests are what
    // keep the token. Kafka 3.x has no version 2; the token stays anyway.
    let tv = t
        .client()
        .metadata()
        .finalized_feature("transaction.version")
        .await
        .unwrap()
        .unwrap_or(0);
    if tv < 2 {
        eprintln!(
            "the broker finalized transaction.version={tv}: renewals keep the token without the pinning; it is not exercised here"
        );
    }
    let role = unique("renew");
    let token = t.acquire_epoch(&role, LEASE).await.unwrap();
    for i in 0..20 {
        t.write_lease(&role, token, &lease("a", token, 1000 + i))
            .await
            .unwrap();
        assert_eq!(
            t.describe(&role).await.unwrap(),
            Some(token),
            "renewal {i} must not bump the epoch"
        );
    }
    // EndTxn answers at PrepareCommit; the markers follow a moment later.
    let description = eventually(|| async {
        let d = t
            .client()
            .describer()
            .describe_transaction(&role)
            .await
            .unwrap()
            .unwrap();
        (d.state == "CompleteCommit").then_some(d)
    })
    .await;
    assert_eq!(description.token(), Some(token));
    assert_eq!(
        description.timeout_ms, 10_000,
        "the lease duration is the txn timeout"
    );
    eventually(|| async {
        let state = RoleState::from_records(&role, &t.read_role_records(&role).await.unwrap());
        (state.lease().map(|l| l.granted_at) == Some(1019)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_aborted_lease_write_stays_invisible() {
    let topic = topic(2).await;
    let t = transport(&topic).await;
    let role = unique("abort");
    let partition = role_partition(&role, 2).unwrap();
    let key = Bytes::from(encode_key(&Key::lease(&role)).unwrap());
    let kafka = client();

    t.register(&role, "m1", 1).await.unwrap();
    let mut session = kafka
        .producer()
        .init_producer_id(&role, LEASE)
        .await
        .unwrap();
    let token = session.token();
    let (_, ghost) = lease_bytes("ghost", token);
    let mut txn = kafka.producer().begin(&mut session).unwrap();
    let aborted_offset = txn
        .send(&topic, partition, key.clone(), Some(ghost), 2)
        .await
        .unwrap();
    txn.abort().await.unwrap();
    t.register(&role, "m2", 3).await.unwrap();
    let (_, real) = lease_bytes("real", token);
    let mut txn = kafka.producer().begin(&mut session).unwrap();
    let committed_offset = txn
        .send(&topic, partition, key, Some(real), 4)
        .await
        .unwrap();
    txn.commit().await.unwrap();

    for reader in [&t, &transport(&topic).await] {
        // The commit markers land a moment after EndTxn answers.
        let records = eventually(|| async {
            let records = reader.read_role_records(&role).await.unwrap();
            records
                .iter()
                .any(|r| r.offset == committed_offset)
                .then_some(records)
        })
        .await;
        assert!(
            records.iter().all(|r| r.offset != aborted_offset),
            "aborted record returned"
        );
        assert!(records.iter().any(|r| r.offset == committed_offset));
        let state = RoleState::from_records(&role, &records);
        assert_eq!(state.lease().unwrap().member, "real");
        let members: Vec<_> = state.members().iter().map(|m| m.member.as_str()).collect();
        assert_eq!(members, ["m1", "m2"]);
    }
    // The raw read agrees: no record at the aborted offset.
    let read = kafka
        .reader()
        .read_committed(&topic, partition, 0)
        .await
        .unwrap();
    assert!(read.records.iter().all(|r| r.offset != aborted_offset));
    assert!(read.next_offset > committed_offset);
}

#[tokio::test]
async fn an_open_transaction_holds_the_read_back_without_blocking_it() {
    let topic = topic(1).await;
    let t = transport(&topic).await;
    let role = unique("lso");
    let kafka = client();
    t.register(&role, "before", 1).await.unwrap();
    let mut session = kafka
        .producer()
        .init_producer_id(&role, LEASE)
        .await
        .unwrap();
    let (_, value) = lease_bytes("pending", session.token());
    let key = Bytes::from(encode_key(&Key::lease(&role)).unwrap());
    let mut txn = kafka.producer().begin(&mut session).unwrap();
    txn.send(&topic, 0, key, Some(value), 2).await.unwrap();
    t.register(&role, "after", 3).await.unwrap();

    let started = Instant::now();
    let state = RoleState::from_records(&role, &t.read_role_records(&role).await.unwrap());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    let members: Vec<_> = state.members().iter().map(|m| m.member.as_str()).collect();
    assert_eq!(
        members,
        ["before"],
        "records past the open transaction wait"
    );
    assert!(state.lease().is_none());

    txn.commit().await.unwrap();
    // The commit markers land a moment after EndTxn answers; then the LSO moves.
    let state = eventually(|| async {
        let state = RoleState::from_records(&role, &t.read_role_records(&role).await.unwrap());
        (state.members().len() == 2).then_some(state)
    })
    .await;
    let members: Vec<_> = state.members().iter().map(|m| m.member.as_str()).collect();
    assert_eq!(members, ["before", "after"]);
    assert_eq!(state.lease().unwrap().member, "pending");
}

#[tokio::test]
async fn a_transaction_left_open_past_the_lease_is_fenced_by_the_coordinator() {
    let topic = topic(1).await;
    let role = unique("timeout");
    let kafka = client();
    let key = Bytes::from(encode_key(&Key::lease(&role)).unwrap());
    let mut session = kafka
        .producer()
        .init_producer_id(&role, Duration::from_secs(2))
        .await
        .unwrap();
    let token = session.token();
    let (_, value) = lease_bytes("sleepy", token);
    {
        let mut txn = kafka.producer().begin(&mut session).unwrap();
        txn.send(&topic, 0, key.clone(), Some(value.clone()), 1)
            .await
            .unwrap();
        // Dropped without commit: the holder went quiet mid-transaction.
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let bumped = loop {
        let now = kafka
            .describer()
            .describe_transaction(&role)
            .await
            .unwrap()
            .unwrap();
        if now.token().is_some_and(|t| t.supersedes(&token)) {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "the coordinator never fenced {token}: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(bumped.producer_id, token.producer_id());
    let mut txn = kafka.producer().begin(&mut session).unwrap();
    let err = txn.send(&topic, 0, key, Some(value), 2).await.unwrap_err();
    assert!(matches!(err, TxnError::Fenced(_)), "{err}");
    // The aborted write is invisible.
    let read = kafka.reader().read_committed(&topic, 0, 0).await.unwrap();
    assert!(read.records.is_empty(), "{:?}", read.records);
}

#[tokio::test]
async fn registration_order_is_offset_order_and_roles_sharing_a_partition_stay_apart() {
    let topic = topic(4).await;
    let t = transport(&topic).await;
    let prefix = unique("share");
    let role = role_in(1, 4, &format!("{prefix}-a"));
    let other = role_in(1, 4, &format!("{prefix}-b"));
    let mut offsets = Vec::new();
    for i in 0..10 {
        offsets.push(t.register(&role, &format!("m{i}"), i).await.unwrap());
        t.register(&other, &format!("x{i}"), i).await.unwrap();
    }
    let token = t.acquire_epoch(&other, LEASE).await.unwrap();
    t.write_lease(&other, token, &lease("x0", token, 1))
        .await
        .unwrap();

    let records = t.read_role_records(&role).await.unwrap();
    for r in &records {
        assert_eq!(
            decode_key(&r.key).unwrap().role,
            role,
            "no record of {other}"
        );
    }
    let state = RoleState::from_records(&role, &records);
    let got: Vec<(String, i64)> = state
        .members()
        .iter()
        .map(|m| (m.member.clone(), m.offset))
        .collect();
    let want: Vec<(String, i64)> = (0..10).map(|i| (format!("m{i}"), offsets[i])).collect();
    assert_eq!(got, want);
    assert!(offsets.windows(2).all(|w| w[0] < w[1]));
    assert!(state.lease().is_none());
    // Registering again moves a member to the tail.
    let again = t.register(&role, "m0", 99).await.unwrap();
    let state = eventually(|| async {
        let state = RoleState::from_records(&role, &t.read_role_records(&role).await.unwrap());
        (state.last_offset() == Some(again)).then_some(state)
    })
    .await;
    assert_eq!(state.rank_of("m0"), Some(9));
    assert_eq!(state.rank_of("m1"), Some(0));
}

#[tokio::test]
async fn a_topic_that_is_not_compacted_or_has_another_partition_count_is_refused() {
    let kafka = client();
    let missing = unique("missing");
    let err = krabka_authority::kafka::KafkaTransport::connect(
        kafka.clone(),
        krabka_authority::kafka::TransportConfig {
            topic: missing.clone(),
            partitions: None,
            create: None,
        },
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");

    let compacted = topic(3).await;
    let err = krabka_authority::kafka::KafkaTransport::connect(
        kafka.clone(),
        krabka_authority::kafka::TransportConfig {
            topic: compacted.clone(),
            partitions: Some(16),
            create: None,
        },
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("has 3 partitions but 16 were configured"),
        "{err}"
    );
    assert_eq!(
        kafka.topics().cleanup_policy(&compacted).await.unwrap(),
        "compact"
    );
}

#[tokio::test]
async fn with_the_broker_stopped_every_operation_fails_within_its_timeout() {
    let broker = OwnBroker::start("stopped", &[]);
    let mut config = config_for(&broker.addr);
    config.request_timeout = Duration::from_secs(1);
    config.operation_timeout = Duration::from_secs(3);
    config.connect_timeout = Duration::from_secs(1);
    let kafka = KafkaClient::new(config).unwrap();
    let topic = unique("stopped");
    kafka
        .topics()
        .ensure_topic(
            &topic,
            &krabka_authority::kafka::TopicSpec {
                partitions: 1,
                replication_factor: 1,
                configs: vec![],
            },
        )
        .await
        .unwrap();
    let t = krabka_authority::kafka::KafkaTransport::connect(
        kafka.clone(),
        krabka_authority::kafka::TransportConfig {
            topic: topic.clone(),
            partitions: Some(1),
            create: None,
        },
    )
    .await
    .unwrap();
    let role = unique("r");
    let token = t.acquire_epoch(&role, LEASE).await.unwrap();
    broker.stop();

    let limit = Duration::from_secs(6);
    macro_rules! fails_in_time {
        ($name:literal, $call:expr) => {{
            let started = Instant::now();
            let result = tokio::time::timeout(Duration::from_secs(30), $call)
                .await
                .expect("no hang");
            let elapsed = started.elapsed();
            let err = result.expect_err(concat!($name, " must fail"));
            assert!(elapsed < limit, "{} took {elapsed:?}", $name);
            assert!(!err.to_string().is_empty());
            eprintln!("{}: failed after {elapsed:?}: {err}", $name);
        }};
    }
    fails_in_time!("describe", t.describe(&role));
    fails_in_time!("acquire", t.acquire_epoch(&role, LEASE));
    fails_in_time!("register", t.register(&role, "m", 1));
    fails_in_time!("read", t.read_role_records(&role));
    fails_in_time!(
        "write lease",
        t.write_lease(&role, token, &lease("m", token, 1))
    );

    // A client that never reached any broker says so.
    let mut config = ClientConfig::new(["127.0.0.1:1"]);
    config.operation_timeout = Duration::from_secs(2);
    let nowhere = KafkaClient::new(config).unwrap();
    let err = nowhere
        .describer()
        .describe_transaction("r")
        .await
        .unwrap_err();
    assert!(matches!(err, KafkaError::GaveUp { .. }), "{err}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
}

#[tokio::test]
async fn a_batch_append_lands_in_order_at_consecutive_offsets() {
    let topic = topic(1).await;
    let kafka = client();
    let records: Vec<(Bytes, Option<Bytes>)> = (0..500)
        .map(|i| {
            let key = Bytes::from(encode_key(&Key::registration("bulk", format!("m{i}"))).unwrap());
            (
                key,
                if i % 10 == 9 {
                    None
                } else {
                    Some(Bytes::from(format!("v{i}")))
                },
            )
        })
        .collect();
    let first = kafka
        .producer()
        .append_batch(&topic, 0, &records, 1)
        .await
        .unwrap();
    let read = kafka.reader().read_committed(&topic, 0, 0).await.unwrap();
    assert_eq!(read.records.len(), 500);
    for (i, (r, (key, value))) in read.records.iter().zip(&records).enumerate() {
        assert_eq!(r.offset, first + i as i64);
        assert_eq!(&r.key, key);
        assert_eq!(&r.value, value, "record {i}");
    }
    assert!(
        kafka
            .producer()
            .append_batch(&topic, 0, &[], 1)
            .await
            .is_err(),
        "an empty batch is refused"
    );
}
