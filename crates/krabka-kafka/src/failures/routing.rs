//! Routing under failure: hedges, reconnect backoff, refused and hung brokers, the cluster id.

use super::*;

#[tokio::test]
async fn a_hung_broker_costs_a_hedge_not_a_request_timeout() {
    // A answers nothing after ApiVersions (a SIGSTOPped broker answers
    // nothing at all; the kernel still accepts); B answers.
    let hung = FakeBroker::start(Arc::new(|_, _| None)).await;
    let brokers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let coordinator = Arc::new(std::sync::Mutex::new((0, String::new())));
    let live = answering(brokers.clone(), coordinator, Arc::default()).await;
    *brokers.lock().unwrap() = vec![(1, hung.addr.clone()), (2, live.addr.clone())];
    // Equally idle brokers are tried in random order (as Kafka's
    // leastLoadedNode starts at a random offset), so rounds go on until the
    // hung one was asked in three of them: a fixed count of rounds misses it
    // by chance (six rounds, one time in 64).
    let mut asked = 0;
    for round in 0..64 {
        let client = client(&[&hung.addr, &live.addr]);
        let before = hung.requests(ApiKey::Metadata).len();
        let started = Instant::now();
        client.metadata().refresh_metadata(&[]).await.unwrap();
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(1500),
            "round {round}: metadata took {took:?} with one broker hung"
        );
        if hung.requests(ApiKey::Metadata).len() > before {
            asked += 1;
            if asked == 3 {
                return;
            }
        }
    }
    panic!("the hung broker was asked in {asked} of 64 rounds");
}

#[tokio::test]
async fn a_broker_that_accepts_and_never_answers_backs_off_longer_each_time() {
    // What the kernel does for a SIGSTOPped broker: it accepts, nothing more.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            sockets.push(socket);
        }
    });
    let mut config = ClientConfig::new([addr.as_str()]);
    config.request_timeout = Duration::from_millis(100);
    config.connect_timeout = Duration::from_millis(100);
    let client = KafkaClient::new(config).unwrap();
    let mut blocks = Vec::new();
    for _ in 0..5 {
        until_unblocked(&client, &addr).await;
        assert!(client.connection(&addr).await.is_err());
        blocks.push(client.state().nodes().blocked(&addr).unwrap().left);
    }
    held.abort();
    // 50, 100, 200, 400, 800 ms, each within 20 %.
    for (i, block) in blocks.iter().enumerate() {
        let step = Duration::from_millis(50 << i);
        assert!(
            *block <= step.mul_f64(1.2) && *block >= step.mul_f64(0.7),
            "failure {i}: blocked {block:?}, expected about {step:?} ({blocks:?})"
        );
    }
}

#[tokio::test]
async fn a_refused_connection_says_so_even_while_its_broker_backs_off() {
    let addr = closed_port();
    let mut config = ClientConfig::new([addr.as_str()]);
    config.operation_timeout = Duration::from_millis(300);
    config.reconnect_backoff = Duration::from_secs(5);
    config.reconnect_backoff_max = Duration::from_secs(5);
    let client = KafkaClient::new(config).unwrap();
    let first = client.connection(&addr).await.unwrap_err().to_string();
    assert!(first.contains("refused"), "{first}");
    let second = client.connection(&addr).await.unwrap_err().to_string();
    assert!(
        second.contains("refused") && second.contains("next try in"),
        "within the backoff: {second}"
    );
    // What /readyz shows ("Kafka: <this>") after an operation gave up.
    let probe = krabka_coordination::cluster::Cluster::partitions(&client, "t")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        probe.contains("gave up") && probe.contains(&addr) && probe.contains("refused"),
        "{probe}"
    );
}

#[tokio::test]
async fn the_first_failure_per_address_is_a_warning_with_its_reason_and_repeats_are_debug() {
    let logs = Logs::capture();
    let addrs = [closed_port(), closed_port()];
    let mut config = ClientConfig::new(addrs.iter().map(String::as_str));
    config.reconnect_backoff = Duration::from_millis(1);
    config.reconnect_backoff_max = Duration::from_millis(1);
    let client = KafkaClient::new(config).unwrap();
    for _ in 0..4 {
        for addr in &addrs {
            until_unblocked(&client, addr).await;
            assert!(client.connection(addr).await.is_err());
        }
    }
    for addr in &addrs {
        let warnings = logs.lines("WARN", addr);
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(warnings[0].contains("refused"), "{}", warnings[0]);
        assert_eq!(logs.lines("DEBUG", &format!("addr=\"{addr}\"")).len(), 3);
    }
}

#[tokio::test]
async fn a_connection_asks_the_cluster_id_first_and_answers_of_an_old_cluster_are_refused() {
    let brokers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let coordinator = Arc::new(std::sync::Mutex::new((1, String::new())));
    let broker = answering(brokers.clone(), coordinator, Arc::default()).await;
    *brokers.lock().unwrap() = vec![(1, broker.addr.clone())];
    let client = client(&[&broker.addr]);
    let conn = client.connection(&broker.addr).await.unwrap();
    assert_eq!(conn.cluster_id(), Some("fake-cluster"));
    assert_eq!(
        client.metadata().cluster_id().as_deref(),
        Some("fake-cluster")
    );
    let first: Vec<ApiKey> = broker.seen.lock().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(
        first,
        [ApiKey::Metadata],
        "the first request after ApiVersions"
    );
    // Another connection found another cluster behind the address: what
    // this one answers now is of the old cluster.
    client.state().learn(Lesson::ClusterId {
        addr: &broker.addr,
        id: Some("rebuilt".into()),
    });
    let request = kafka_protocol::messages::MetadataRequest::default();
    let refused = client
        .call_on(&conn, &request, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, KafkaError::ConnectionClosed { reason, .. } if reason.contains("another cluster")),
        "{refused}"
    );
    assert!(conn.is_closed());
    let again = client.connection(&broker.addr).await.unwrap();
    assert!(!Arc::ptr_eq(&conn, &again), "a new connection");
    assert_eq!(
        client.metadata().cluster_id().as_deref(),
        Some("fake-cluster"),
        "which asked again"
    );
}

#[tokio::test]
async fn a_hung_broker_whose_backoff_ended_is_asked_after_busy_live_ones() {
    // Broker 0 accepts and answers nothing (a SIGSTOPped broker); 1 and 2
    // answer Metadata, a request of the topic "busy" after 100 ms. Once 0
    // failed and its backoff ended, a request any broker can answer goes
    // to 1 or 2 even while both have a request in flight (as Java's
    // `leastLoadedNode` prefers a connected node to one it must connect
    // to): not to 0, which would cost it the hedge delay.
    let hung = FakeBroker::start(Arc::new(|_, _| None)).await;
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut live = Vec::new();
    for _ in 0..2 {
        let addrs = addrs.clone();
        let script = Arc::new(move |header: &RequestHeader, _body: Bytes| {
            let addrs = addrs.lock().unwrap().clone();
            let list: Vec<(i32, &str)> = (0..).zip(addrs.iter().map(String::as_str)).collect();
            (header.request_api_key == ApiKey::Metadata as i16)
                .then(|| answer(header, &metadata(&list, None)))
        });
        let delay = Arc::new(|header: &RequestHeader, body: &Bytes| {
            let asked: MetadataRequest = request(header.request_api_version, body.clone());
            let busy = asked.topics.is_some_and(|t| {
                t.iter()
                    .any(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == "busy"))
            });
            if busy {
                Duration::from_millis(100)
            } else {
                Duration::ZERO
            }
        }) as Delay;
        live.push(FakeBroker::start_delayed(script, delay).await);
    }
    *addrs.lock().unwrap() = vec![
        hung.addr.clone(),
        live[0].addr.clone(),
        live[1].addr.clone(),
    ];
    let mut config = ClientConfig::new([live[0].addr.as_str()]);
    config.request_timeout = Duration::from_millis(300);
    config.connect_timeout = Duration::from_millis(300);
    let client = KafkaClient::new(config).unwrap();
    client.metadata().refresh_metadata(&[]).await.unwrap();
    assert!(client.connection(&hung.addr).await.is_err());
    until_unblocked(&client, &hung.addr).await;
    let asked_hung = || hung.requests(ApiKey::Metadata).len();
    let before = asked_hung();
    for broker in &live {
        let (client, addr) = (client.clone(), broker.addr.clone());
        tokio::spawn(async move {
            let busy = crate::metadata::build_metadata(vec!["busy".to_owned()]);
            client.send_to(&addr, &busy).await
        });
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let request = crate::metadata::build_metadata(Vec::new());
    let (_, from) = client.send_any(&request, &[]).await.unwrap();
    assert_ne!(from, hung.addr);
    assert_eq!(asked_hung(), before, "the hung broker was asked again");
}
