//! Coordinator lookups: shared, once per backoff, all ids of a broker that lost them.

use super::*;

#[tokio::test]
async fn concurrent_lookups_of_one_key_share_one_find_coordinator() {
    let brokers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let coordinator = Arc::new(std::sync::Mutex::new((1, String::new())));
    let lookups = Arc::new(AtomicUsize::new(0));
    let broker = answering(brokers.clone(), coordinator.clone(), lookups.clone()).await;
    *brokers.lock().unwrap() = vec![(1, broker.addr.clone())];
    *coordinator.lock().unwrap() = (1, broker.addr.clone());
    let client = client(&[&broker.addr]);
    let keys = ["r".to_owned()];
    let calls = (0..50).map(|_| async { client.lookup().coordinators(&keys).await });
    let answers = futures::future::join_all(calls).await;
    assert!(answers.iter().all(|a| a["r"].as_ref().unwrap().id == 1));
    assert_eq!(
        lookups.load(Ordering::SeqCst),
        1,
        "one lookup for 50 callers"
    );
}

#[tokio::test]
async fn the_ids_of_a_failed_coordinator_are_looked_up_once_per_backoff() {
    let brokers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let coordinator = Arc::new(std::sync::Mutex::new((1, String::new())));
    let lookups = Arc::new(AtomicUsize::new(0));
    let broker = answering(brokers.clone(), coordinator.clone(), lookups.clone()).await;
    *brokers.lock().unwrap() = vec![(1, broker.addr.clone())];
    *coordinator.lock().unwrap() = (1, broker.addr.clone());
    let client = client(&[&broker.addr]);
    let keys: Vec<String> = (0..20).map(|i| format!("role-{i}")).collect();
    client.lookup().coordinators(&keys).await;
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    // The coordinator's broker says it no longer coordinates them (and
    // keeps naming itself): every caller of every one of its ids, every
    // 10 ms for 1.5 s.
    let unavailable = KafkaError::broker("DescribeTransactions", 15, None);
    client.state().learn(Lesson::DescribeFailed {
        addr: &broker.addr,
        error: &unavailable,
    });
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        for key in &keys {
            client
                .lookup()
                .coordinators(std::slice::from_ref(key))
                .await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Gates open at 0, 100, 300, 700 and 1500 ms: at most five lookups for
    // 20 ids and ~3,000 calls.
    let after = lookups.load(Ordering::SeqCst) - 1;
    assert!((2..=5).contains(&after), "{after} lookups in 1.5 s");
}

#[tokio::test]
async fn not_coordinator_looks_every_id_of_the_broker_up_again_in_one_batch() {
    let brokers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let coordinator = Arc::new(std::sync::Mutex::new((1, String::new())));
    let lookups = Arc::new(AtomicUsize::new(0));
    let broker = answering(brokers.clone(), coordinator.clone(), lookups.clone()).await;
    *brokers.lock().unwrap() = vec![(1, broker.addr.clone())];
    *coordinator.lock().unwrap() = (1, broker.addr.clone());
    let client = client(&[&broker.addr]);
    let keys: Vec<String> = (0..50).map(|i| format!("role-{i}")).collect();
    client.lookup().coordinators(&keys).await;
    // The coordinator moved: a describe answered NOT_COORDINATOR for one id.
    let moved = KafkaError::broker("DescribeTransactions", 16, None);
    client.state().learn(Lesson::DescribeFailed {
        addr: &broker.addr,
        error: &moved,
    });
    // A check of one id (the path every check takes) looks them up.
    let before = broker.requests(ApiKey::FindCoordinator).len();
    client.lookup().coordinator(&keys[0]).await.unwrap();
    let sent = broker.requests(ApiKey::FindCoordinator);
    assert_eq!(sent.len(), before + 1, "one lookup");
    let (version, body) = sent.last().unwrap().clone();
    let asked: FindCoordinatorRequest = request(version, body);
    assert_eq!(
        asked.coordinator_keys.len(),
        50,
        "with every id of the broker"
    );
}

/// Many ids no coordinator is known for (a replica's first poll, a batch
/// check on a fresh client): one FindCoordinator for all of them, then as
/// few describes as carry them. Looked up and queued by each attempt as it
/// was first polled, the ids went out in waves on a multi-threaded runtime,
/// the lookup task and the sender taking the ids placed so far (12-16
/// describes for what 6 carry in a replica's first poll of 1,000 roles on
/// three real brokers; here 5-17 describes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_unknown_ids_are_looked_up_in_one_find_coordinator() {
    let brokers =
        scripted_brokers(&[(7, 1)], Arc::new(AtomicUsize::new(0)), &[Duration::ZERO]).await;
    let broker = &brokers[0];
    let client = client(&[&broker.addr]);
    client.metadata().refresh_metadata(&[]).await.unwrap();
    let ids: Vec<String> = (0..1_000).map(|i| format!("role-{i:04}")).collect();
    all_described_as(&client, &ids, (7, 1)).await;
    assert_eq!(
        broker.requests(ApiKey::FindCoordinator).len(),
        1,
        "1,000 ids, {} describes",
        broker.requests(ApiKey::DescribeTransactions).len()
    );
    assert_eq!(
        broker.requests(ApiKey::DescribeTransactions).len(),
        ids.len().div_ceil(client.config().max_describe_batch),
        "batches of at most {} ids",
        client.config().max_describe_batch
    );
}
