//! Partition reads: the leader epoch, and a deposed leader's reads never fresher than its last confirmation.

use super::*;
use krabka_coordination::time::boot_now;

#[tokio::test]
async fn a_fetch_carries_the_leader_epoch_and_a_fenced_epoch_moves_it_to_the_new_leader() {
    let moved = Arc::new(AtomicBool::new(false));
    let addrs: Arc<std::sync::Mutex<(String, String)>> = Arc::default();
    let script = |me: i32| {
        let (moved, addrs) = (moved.clone(), addrs.clone());
        Arc::new(
            move |header: &kafka_protocol::messages::RequestHeader, body: Bytes| {
                let (a, b) = addrs.lock().unwrap().clone();
                let brokers = [(1, a.as_str()), (2, b.as_str())];
                match header.request_api_key {
                    k if k == ApiKey::Metadata as i16 => {
                        let partitions: &[(i32, i32, i32)] = if moved.load(Ordering::SeqCst) {
                            &[(0, 2, 6)]
                        } else {
                            &[(0, 1, 5)]
                        };
                        let response: MetadataResponse =
                            metadata(&brokers, Some(("t", partitions)));
                        Some(answer(header, &response))
                    }
                    k if k == ApiKey::Fetch as i16 => {
                        let fetch: FetchRequest = request(header.request_api_version, body);
                        let epoch = fetch.topics[0].partitions[0].current_leader_epoch;
                        // Broker 1 lost the leadership at epoch 6.
                        let code = if me == 1 && epoch < 6 {
                            moved.store(true, Ordering::SeqCst);
                            74 // FENCED_LEADER_EPOCH
                        } else {
                            0
                        };
                        let response = FetchResponse::default().with_responses(vec![
                            FetchableTopicResponse::default()
                                .with_topic(TopicName(StrBytes::from_static_str("t")))
                                .with_partitions(vec![
                                    PartitionData::default()
                                        .with_partition_index(0)
                                        .with_error_code(code),
                                ]),
                        ]);
                        Some(answer(header, &response))
                    }
                    _ => None,
                }
            },
        ) as crate::fake::Script
    };
    let one = FakeBroker::start(script(1)).await;
    let two = FakeBroker::start(script(2)).await;
    *addrs.lock().unwrap() = (one.addr.clone(), two.addr.clone());
    let client = client(&[&one.addr]);

    let (groups, errors) = client.reader().partition_leaders("t", &[(0, 0)]).await;
    assert!(errors.is_empty(), "{errors:?}");
    let (leader, positions) = groups.into_iter().next().unwrap();
    assert_eq!((leader.id, positions[0].leader_epoch), (1, 5));
    let answers = client
        .reader()
        .fetch_from(&leader, "t", &positions, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(answers[0].1.as_ref().unwrap_err().code(), Some(74));

    // The fenced epoch asked for fresh metadata: the new leader, its epoch.
    let (groups, _) = client.reader().partition_leaders("t", &[(0, 0)]).await;
    let (leader, positions) = groups.into_iter().next().unwrap();
    assert_eq!((leader.id, positions[0].leader_epoch), (2, 6));
    let answers = client
        .reader()
        .fetch_from(&leader, "t", &positions, Duration::ZERO)
        .await
        .unwrap();
    assert!(answers[0].1.is_ok());
    let sent: FetchRequest = {
        let (version, body) = two.requests(ApiKey::Fetch).remove(0);
        request(version, body)
    };
    assert_eq!(sent.topics[0].partitions[0].current_leader_epoch, 6);
}

#[tokio::test]
async fn reads_of_a_deposed_leader_are_never_fresher_than_its_last_confirmation() {
    // Broker 1 leads t-0 at epoch 4 and, cut off from the controller, keeps
    // believing it (and serving reads at epoch 4). Brokers 2 and 3 confirm
    // it until they learn that broker 2 leads at epoch 5 (`moved`); they do
    // not answer metadata while `silent`; broker 2 serves reads at epoch 5
    // once `serving`.
    let moved = Arc::new(AtomicBool::new(false));
    let silent = Arc::new(AtomicBool::new(false));
    let serving = Arc::new(AtomicBool::new(false));
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let script = |me: i32| {
        let (moved, silent, serving, addrs) = (
            moved.clone(),
            silent.clone(),
            serving.clone(),
            addrs.clone(),
        );
        Arc::new(
            move |header: &kafka_protocol::messages::RequestHeader, body: Bytes| {
                let addrs = addrs.lock().unwrap().clone();
                let brokers = numbered(&addrs);
                let believed = if me != 1 && moved.load(Ordering::SeqCst) {
                    (2, 5)
                } else {
                    (1, 4)
                };
                match ApiKey::try_from(header.request_api_key).unwrap() {
                    ApiKey::Metadata if me != 1 && silent.load(Ordering::SeqCst) => None,
                    ApiKey::Metadata => Some(leading(header, body, &brokers, believed)),
                    ApiKey::Fetch if believed.0 == me => {
                        let asked: FetchRequest = request(header.request_api_version, body.clone());
                        let epoch = asked.topics[0].partitions[0].current_leader_epoch;
                        match epoch.cmp(&believed.1) {
                            std::cmp::Ordering::Less => Some(fetched(header, body, 74)),
                            std::cmp::Ordering::Greater => Some(fetched(header, body, 75)),
                            _ if me == 2 && !serving.load(Ordering::SeqCst) => None,
                            _ => Some(fetched(header, body, 0)),
                        }
                    }
                    ApiKey::Fetch => Some(fetched(header, body, 6)),
                    _ => None,
                }
            },
        ) as crate::fake::Script
    };
    let one = FakeBroker::start(script(1)).await;
    let two = FakeBroker::start(script(2)).await;
    let three = FakeBroker::start(script(3)).await;
    *addrs.lock().unwrap() = vec![one.addr.clone(), two.addr.clone(), three.addr.clone()];
    let mut config = ClientConfig::new([one.addr.as_str(), two.addr.as_str()]);
    config.request_timeout = Duration::from_secs(1);
    config.max_decompressed_batch_bytes = Some(crate::DEFAULT_MAX_BATCH_BYTES);
    let client = KafkaClient::new(config).unwrap();
    let mut reads = client
        .reader()
        .tail("t", vec![0], Duration::from_millis(200));
    let as_of = |update: krabka_coordination::cluster::Tailed| match update {
        krabka_coordination::cluster::Tailed::Read { complete_as_of, .. } => complete_as_of,
        krabka_coordination::cluster::Tailed::Failed { .. }
        | krabka_coordination::cluster::Tailed::Restarted { .. } => None,
    };
    let five = Duration::from_secs(5);
    // Confirmed by broker 2: fresh.
    let started = Instant::now();
    loop {
        let update = tokio::time::timeout(five, reads.recv()).await.unwrap();
        if as_of(update.unwrap()).is_some() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "never confirmed"
        );
    }
    // The leader is deposed, and for a while no other broker can say so:
    // broker 1's reads go on, none claiming a later instant.
    // Reads' instants count suspends (`boot_now`); waits go by tokio's.
    let (deposed, deposed_at) = (Instant::now(), boot_now());
    silent.store(true, Ordering::SeqCst);
    moved.store(true, Ordering::SeqCst);
    let mut unconfirmed = 0;
    while deposed.elapsed() < Duration::from_millis(1500) {
        let Ok(Some(update)) = tokio::time::timeout(Duration::from_millis(200), reads.recv()).await
        else {
            continue;
        };
        unconfirmed += 1;
        if let Some(at) = as_of(update) {
            assert!(
                at <= deposed_at,
                "a read complete {:?} after the move",
                at - deposed_at
            );
        }
    }
    assert!(
        unconfirmed >= 3,
        "{unconfirmed} reads of the deposed leader"
    );
    // Once another broker answers, the deposed leader is stale and no
    // longer read.
    silent.store(false, Ordering::SeqCst);
    let told = Instant::now();
    while !client.state().epochs().is_stale(&one.addr) {
        assert!(
            told.elapsed() < Duration::from_secs(5),
            "never seen deposed"
        );
        let _ = tokio::time::timeout(Duration::from_millis(100), reads.recv()).await;
    }
    // A poll sent before may still come back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let polls = one.requests(ApiKey::Fetch).len();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(one.requests(ApiKey::Fetch).len(), polls, "no longer read");
    // The new leader serves: fresh again.
    serving.store(true, Ordering::SeqCst);
    let resumed = Instant::now();
    loop {
        let update = tokio::time::timeout(five, reads.recv()).await.unwrap();
        if as_of(update.unwrap()).is_some_and(|at| at > deposed_at) {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(5),
            "never fresh again"
        );
    }
    eprintln!(
        "{unconfirmed} reads of the deposed leader, none fresher than the move; seen deposed {:?} after another broker could tell; fresh again {:?} after the new leader served",
        told.elapsed(),
        resumed.elapsed()
    );
}

#[tokio::test]
async fn a_read_has_its_leader_confirmed_by_another_broker_first() {
    // Broker 1, cut off, still leads t-0 at epoch 4 as far as it knows, and
    // it is all the client was told; brokers 2 and 3 know broker 2 leads
    // at epoch 5.
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let script = |me: i32| {
        let addrs = addrs.clone();
        Arc::new(
            move |header: &kafka_protocol::messages::RequestHeader, body: Bytes| {
                let addrs = addrs.lock().unwrap().clone();
                let brokers = numbered(&addrs);
                let believed = if me == 1 { (1, 4) } else { (2, 5) };
                match ApiKey::try_from(header.request_api_key).unwrap() {
                    ApiKey::Metadata => Some(leading(header, body, &brokers, believed)),
                    ApiKey::ListOffsets => Some(listed(header, 0)),
                    _ => None,
                }
            },
        ) as crate::fake::Script
    };
    let brokers = [
        FakeBroker::start(script(1)).await,
        FakeBroker::start(script(2)).await,
        FakeBroker::start(script(3)).await,
    ];
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    let client = client(&[&brokers[0].addr]);
    client.metadata().refresh_metadata(&["t"]).await.unwrap();
    let read = client.reader().read_committed("t", 0, 0).await.unwrap();
    assert_eq!(read.next_offset, 0);
    assert!(
        brokers[0].requests(ApiKey::ListOffsets).is_empty(),
        "the cut-off broker's log was not read"
    );
    assert_eq!(
        brokers[1].requests(ApiKey::ListOffsets).len(),
        1,
        "the leader's was"
    );
    assert!(client.state().epochs().is_stale(&brokers[0].addr));
}

#[tokio::test]
async fn reads_behind_a_hanging_transaction_are_complete_only_as_of_when_it_began() {
    // One broker leads t-0. Its answers report the last stable offset and
    // the high watermark of `ends`: first nothing open (3, 3), then a
    // transaction that stays open at 3 while other writes raise the high
    // watermark, then it ends (9, 9).
    let ends = Arc::new(std::sync::Mutex::new((3i64, 3i64)));
    let addr: Arc<std::sync::Mutex<String>> = Arc::default();
    let script = {
        let (ends, addr) = (ends.clone(), addr.clone());
        Arc::new(
            move |header: &kafka_protocol::messages::RequestHeader, body: Bytes| {
                let addr = addr.lock().unwrap().clone();
                match ApiKey::try_from(header.request_api_key).unwrap() {
                    ApiKey::Metadata => {
                        let response: MetadataResponse =
                            metadata(&[(1, addr.as_str())], Some(("t", &[(0, 1, 5)])));
                        Some(answer(header, &response))
                    }
                    ApiKey::Fetch => {
                        let (lso, hw) = *ends.lock().unwrap();
                        Some(fetched_as(
                            header,
                            body,
                            PartitionData::default()
                                .with_partition_index(0)
                                .with_last_stable_offset(lso)
                                .with_high_watermark(hw),
                        ))
                    }
                    _ => None,
                }
            },
        ) as crate::fake::Script
    };
    let logs = Logs::capture();
    let broker = FakeBroker::start(script).await;
    *addr.lock().unwrap() = broker.addr.clone();
    let client = client(&[&broker.addr]);
    let mut reads = client
        .reader()
        .tail("t", vec![3], Duration::from_millis(50));
    let mut next = async || -> Option<Instant> {
        match tokio::time::timeout(Duration::from_secs(5), reads.recv()).await {
            Ok(Some(krabka_coordination::cluster::Tailed::Read { complete_as_of, .. })) => {
                complete_as_of
            }
            other => panic!("no read: {other:?}"),
        }
    };
    let fresh = |at: Option<Instant>, after: Instant| at.is_some_and(|at| at >= after);
    // Nothing open: each read is complete as of its own fetch.
    let (before, before_at) = (Instant::now(), boot_now());
    while !fresh(next().await, before_at) {
        assert!(before.elapsed() < Duration::from_secs(5), "never complete");
    }
    // A transaction opens at 3 and hangs while the high watermark grows.
    let (opened, opened_at) = (Instant::now(), boot_now());
    let mut held = 0;
    for hw in 4..=9 {
        *ends.lock().unwrap() = (3, hw);
        let began = Instant::now();
        while began.elapsed() < Duration::from_millis(200) {
            let at = next().await;
            // A fetch sent just before the change may still come back.
            if began.elapsed() > Duration::from_millis(100) {
                let at = at.expect("complete as of before the transaction");
                assert!(
                    at <= opened_at,
                    "a read complete {:?} after the transaction began",
                    at - opened_at
                );
                held += 1;
            }
        }
    }
    // Held back past HELD_BACK_WARN: said once, at warn.
    while opened.elapsed() < Duration::from_millis(5_500) {
        let at = next().await.expect("complete as of before the transaction");
        assert!(at <= opened_at);
    }
    let held_back = "holds the partition's last stable offset back";
    assert_eq!(
        logs.lines("WARN", held_back).len(),
        1,
        "{:?}",
        logs.lines("", "t")
    );
    // It ends: complete again as of the reads after it.
    *ends.lock().unwrap() = (9, 9);
    let (ended, ended_at) = (Instant::now(), boot_now());
    while !fresh(next().await, ended_at) {
        assert!(
            ended.elapsed() < Duration::from_secs(5),
            "never complete again"
        );
    }
    assert!(held >= 6, "{held} reads behind the open transaction");
    assert_eq!(logs.lines("WARN", held_back).len(), 1);
    assert_eq!(
        logs.lines("INFO", "last stable offset moves again").len(),
        1
    );
}

#[tokio::test]
async fn a_read_bounds_batches_by_the_topics_max_message_bytes_asked_once() {
    use kafka_protocol::messages::DescribeConfigsResponse;
    use kafka_protocol::messages::describe_configs_response::{
        DescribeConfigsResourceResult, DescribeConfigsResult,
    };
    use kafka_protocol::records::Compression;
    // t-0 holds a zstd batch of 8 KiB of zeros at 0, a plain one at 1; the
    // topic takes batches of 4 KiB.
    let mut records = crate::fake::bomb_batch(Compression::Zstd, b"k", 8 * 1024).to_vec();
    records.extend_from_slice(&crate::batch::tests::batch(
        1,
        1,
        -1,
        false,
        None,
        Compression::None,
    ));
    let records = Bytes::from(records);
    let addr: Arc<std::sync::Mutex<String>> = Arc::default();
    let at = addr.clone();
    let broker = FakeBroker::start(Arc::new(move |header, body: Bytes| {
        let me = at.lock().unwrap().clone();
        let brokers = [(0, me.as_str())];
        match ApiKey::try_from(header.request_api_key).unwrap() {
            ApiKey::Metadata => Some(leading(header, body, &brokers, (0, 1))),
            ApiKey::DescribeConfigs => Some(answer(
                header,
                &DescribeConfigsResponse::default().with_results(vec![
                    DescribeConfigsResult::default().with_configs(vec![
                        DescribeConfigsResourceResult::default()
                            .with_name(StrBytes::from_static_str("max.message.bytes"))
                            .with_value(Some(StrBytes::from_static_str("4096"))),
                    ]),
                ]),
            )),
            ApiKey::ListOffsets => Some(listed(header, 2)),
            ApiKey::Fetch => {
                let asked: FetchRequest = request(header.request_api_version, body.clone());
                let from = asked.topics[0].partitions[0].fetch_offset;
                let data = PartitionData::default()
                    .with_partition_index(0)
                    .with_high_watermark(2)
                    .with_last_stable_offset(2)
                    .with_records(Some(if from == 0 {
                        records.clone()
                    } else {
                        Bytes::new()
                    }));
                Some(fetched_as(header, body, data))
            }
            _ => None,
        }
    }))
    .await;
    *addr.lock().unwrap() = broker.addr.clone();
    let config = ClientConfig::new([broker.addr.as_str()]);
    let client = KafkaClient::new(config).unwrap();
    for _ in 0..2 {
        let read = client.reader().read_committed("t", 0, 0).await.unwrap();
        let offsets: Vec<i64> = read.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [1], "the plain batch is read");
        let skipped = krabka_coordination::SkippedBatch {
            base_offset: 0,
            last_offset: 0,
            compression: "zstd",
            limit_bytes: 4096,
        };
        assert_eq!(read.skipped, [skipped]);
        assert_eq!(read.next_offset, 2, "read past it");
    }
    // (The topic's min.insync.replicas is read too, for its leader's
    // confirmations: not counted here.)
    let asked_bound = || {
        broker
            .requests(ApiKey::DescribeConfigs)
            .into_iter()
            .filter(|(v, body)| {
                let asked: kafka_protocol::messages::DescribeConfigsRequest =
                    request(*v, body.clone());
                asked.resources.iter().any(|r| {
                    r.configuration_keys
                        .iter()
                        .flatten()
                        .any(|k| k.as_str() == "max.message.bytes")
                })
            })
            .count()
    };
    assert_eq!(asked_bound(), 1, "asked once");
    // The client's own bound comes first.
    let mut config = ClientConfig::new([broker.addr.as_str()]);
    config.max_decompressed_batch_bytes = Some(16 * 1024);
    let client = KafkaClient::new(config).unwrap();
    let read = client.reader().read_committed("t", 0, 0).await.unwrap();
    assert_eq!(read.records.len(), 2);
    assert!(read.skipped.is_empty());
    assert_eq!(asked_bound(), 1);
}

/// Issue 52 (2), for the views: a cluster of one broker, replaced behind
/// its address. The old process, cut off, leads t-0 at epoch 4 as far as it
/// knows and serves reads there on the tailer's connection; new
/// connections reach the new process, which leads at epoch 6. No other
/// broker can say so: the broker's address asked on a connection of its
/// own does. Before, a cluster known to be one broker counted every read
/// complete as of its fetch, so the old process's reads stayed fresh for as
/// long as its connection lived.
#[tokio::test]
async fn one_broker_replaced_behind_its_address_makes_no_read_fresh() {
    let addr: Arc<std::sync::Mutex<String>> = Arc::default();
    let script = |epoch: i32| {
        let addr = addr.clone();
        Arc::new(
            move |header: &kafka_protocol::messages::RequestHeader, body: Bytes| {
                let addr = addr.lock().unwrap().clone();
                let brokers = [(1, addr.as_str())];
                match ApiKey::try_from(header.request_api_key).unwrap() {
                    ApiKey::Metadata => Some(leading(header, body, &brokers, (1, epoch))),
                    ApiKey::Fetch => {
                        let asked: FetchRequest = request(header.request_api_version, body.clone());
                        let at = asked.topics[0].partitions[0].current_leader_epoch;
                        let code = match at.cmp(&epoch) {
                            std::cmp::Ordering::Less => 74,
                            std::cmp::Ordering::Greater => 75,
                            std::cmp::Ordering::Equal => 0,
                        };
                        Some(fetched(header, body, code))
                    }
                    _ => None,
                }
            },
        ) as crate::fake::Script
    };
    let broker = FakeBroker::start(script(4)).await;
    *addr.lock().unwrap() = broker.addr.clone();
    let mut config = ClientConfig::new([broker.addr.as_str()]);
    config.request_timeout = Duration::from_secs(1);
    config.max_decompressed_batch_bytes = Some(crate::DEFAULT_MAX_BATCH_BYTES);
    let client = KafkaClient::new(config).unwrap();
    let mut reads = client
        .reader()
        .tail("t", vec![0], Duration::from_millis(200));
    let as_of = |update: krabka_coordination::cluster::Tailed| match update {
        krabka_coordination::cluster::Tailed::Read { complete_as_of, .. } => complete_as_of,
        _ => None,
    };
    let five = Duration::from_secs(5);
    let started = Instant::now();
    loop {
        let update = tokio::time::timeout(five, reads.recv()).await.unwrap();
        if as_of(update.unwrap()).is_some() {
            break;
        }
        assert!(started.elapsed() < five, "never confirmed");
    }
    assert!(client.state().metadata().single_broker());

    broker.replace_for_new_connections(script(6));
    let moved = boot_now();
    let mut reads_after = 0;
    let mut fresh_again = None;
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(3) {
        let Ok(Some(update)) = tokio::time::timeout(Duration::from_millis(200), reads.recv()).await
        else {
            continue;
        };
        reads_after += 1;
        if let Some(at) = as_of(update)
            && at > moved
        {
            // Complete only under the newest epoch known: the old process
            // refuses epoch 6, so this read is the new process's.
            let newest = client.state().epochs().newest_epoch("t", 0);
            assert_eq!(newest, Some(6), "a read fresh after the move at {newest:?}");
            fresh_again.get_or_insert(since.elapsed());
        }
    }
    // Fresh again only once read from the new process at its epoch.
    let fresh_again = fresh_again.expect("never fresh again");
    let old_polls = broker.requests(ApiKey::Fetch).len();
    assert!(reads_after >= 3, "{reads_after} reads after the move");
    assert!(
        fresh_again < Duration::from_secs(2),
        "fresh again only {fresh_again:?} after the move"
    );
    let sent: Vec<i32> = broker
        .requests(ApiKey::Fetch)
        .into_iter()
        .map(|(v, body)| {
            let asked: FetchRequest = request(v, body);
            asked.topics[0].partitions[0].current_leader_epoch
        })
        .collect();
    assert_eq!(sent.last(), Some(&6), "read at the new epoch: {sent:?}");
    eprintln!(
        "{reads_after} reads after the move ({old_polls} fetches in all); fresh again {fresh_again:?} after it"
    );
}

/// Issue 52 (6): the log start moves past the tailer (records deleted
/// before it read them): the fetch answers OFFSET_OUT_OF_RANGE and the
/// tailer says the partition's history restarts at the log start, then
/// reads on from there. Before, it sent an empty read that only moved the
/// position, as if nothing had been lost.
#[tokio::test]
async fn records_deleted_under_the_tailer_restart_the_partitions_history() {
    use krabka_coordination::cluster::Tailed;
    const OFFSET_OUT_OF_RANGE: i16 = 1;
    let addr: Arc<std::sync::Mutex<String>> = Arc::default();
    let script = {
        let addr = addr.clone();
        Arc::new(
            move |header: &kafka_protocol::messages::RequestHeader, body: Bytes| {
                let addr = addr.lock().unwrap().clone();
                match ApiKey::try_from(header.request_api_key).unwrap() {
                    ApiKey::Metadata => {
                        let response: MetadataResponse =
                            metadata(&[(1, addr.as_str())], Some(("t", &[(0, 1, 5)])));
                        Some(answer(header, &response))
                    }
                    // The log starts at 5 now.
                    ApiKey::ListOffsets => Some(listed(header, 5)),
                    ApiKey::Fetch => {
                        let asked: FetchRequest = request(header.request_api_version, body.clone());
                        let data = match asked.topics[0].partitions[0].fetch_offset {
                            // Records 0 and 1 are read...
                            0 => PartitionData::default().with_records(Some(
                                crate::batch::tests::batch(
                                    0,
                                    2,
                                    -1,
                                    false,
                                    None,
                                    kafka_protocol::records::Compression::None,
                                ),
                            )),
                            // ...then 2 to 4 are deleted before the next fetch.
                            offset if offset < 5 => {
                                PartitionData::default().with_error_code(OFFSET_OUT_OF_RANGE)
                            }
                            _ => PartitionData::default(),
                        };
                        let data = data
                            .with_partition_index(0)
                            .with_last_stable_offset(7)
                            .with_high_watermark(7)
                            .with_log_start_offset(5);
                        Some(fetched_as(header, body, data))
                    }
                    _ => None,
                }
            },
        ) as crate::fake::Script
    };
    let broker = FakeBroker::start(script).await;
    *addr.lock().unwrap() = broker.addr.clone();
    let client = client(&[&broker.addr]);
    let mut reads = client
        .reader()
        .tail("t", vec![0], Duration::from_millis(50));
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(5), reads.recv())
            .await
            .expect("an update within 5 s")
            .expect("the tailer goes on")
    };
    match next().await {
        Tailed::Read {
            records,
            next_offset,
            ..
        } => {
            assert_eq!(records.len(), 2);
            assert_eq!(next_offset, 2);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        next().await,
        Tailed::Restarted {
            partition: 0,
            from: 5
        },
        "records 2 to 4 were never read"
    );
    match next().await {
        Tailed::Read {
            records,
            next_offset,
            ..
        } => assert_eq!((records.len(), next_offset), (0, 5), "read on from 5"),
        other => panic!("{other:?}"),
    }
}
