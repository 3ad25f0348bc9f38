//! The describes' confirmations: a stale or unconfirmed answer is never used, a hung confirming broker costs a hedge.

use super::*;

#[tokio::test]
async fn an_answer_another_broker_does_not_confirm_is_never_used() {
    // Broker 0 paused and came back: its metadata already names broker 1 as
    // the coordinator of "r", its transaction state still has the old pair.
    let brokers = two_brokers([(7, 1), (7, 2)]).await;
    let client = client(&[&brokers[0].addr]);
    client.metadata().refresh_metadata(&[]).await.unwrap();
    let paused = Broker {
        id: 0,
        addr: brokers[0].addr.clone(),
    };
    client.state().learn(Lesson::CoordinatorFound {
        key: "r",
        broker: &paused,
    });
    let answer = client
        .describer()
        .describe_transaction("r")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2));
    assert_eq!(brokers[0].requests(ApiKey::DescribeTransactions).len(), 1);
    assert_eq!(brokers[1].requests(ApiKey::DescribeTransactions).len(), 1);
}

#[tokio::test]
async fn a_stale_answer_whose_confirmation_was_sent_before_the_check_arrived_is_never_believed() {
    stale_answer_confirmed_before_the_check_arrived(&["r"]).await;
}

#[tokio::test]
async fn a_stale_answer_is_never_believed_when_many_ids_are_confirmed_at_once() {
    stale_answer_confirmed_before_the_check_arrived(&["r", "s", "t"]).await;
}

#[tokio::test]
async fn a_lone_check_whose_confirming_broker_hangs_costs_a_hedge_not_the_window() {
    // Broker 1 coordinates "r"; broker 0 holds its first confirmation 10 s
    // (hung), broker 2 answers at once. A lone check whose confirmation
    // went to broker 0 is confirmed by the next round, at broker 2, once
    // the hedge delay passed: not after the 1.5 s window.
    let brokers = scripted_brokers(
        &[(7, 2), (7, 2), (7, 2)],
        Arc::new(AtomicUsize::new(1)),
        &[Duration::from_secs(10), Duration::ZERO, Duration::ZERO],
    )
    .await;
    let coordinator = Broker {
        id: 1,
        addr: brokers[1].addr.clone(),
    };
    // The first confirmation goes to 0 or 2 at random: a fresh client
    // each time, until one was sent to the hung broker.
    for _ in 0..20 {
        let client = client(&[&brokers[2].addr]);
        client.metadata().refresh_metadata(&[]).await.unwrap();
        client.state().learn(Lesson::CoordinatorFound {
            key: "r",
            broker: &coordinator,
        });
        let started = Instant::now();
        let answer = client
            .describer()
            .describe_transaction("r")
            .await
            .unwrap()
            .unwrap();
        let took = started.elapsed();
        assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2));
        if confirmations_at(&brokers[0]) > 0 {
            assert!(
                took < Duration::from_secs(1),
                "the hung confirmation held the check {took:?}"
            );
            return;
        }
    }
    panic!("no confirmation went to the hung broker in 20 checks");
}

#[tokio::test]
async fn a_broker_that_hung_is_not_asked_to_confirm_again_while_two_others_can() {
    // Broker 1 coordinates "r"; broker 0 hangs from its first confirmation
    // on (every request but ApiVersions held a minute, as a stopped process
    // whose kernel still accepts), broker 2 answers. The rounds prefer a
    // confirming broker without batches of its own, which the hung one
    // always is; once a request to it timed out it must not be asked again
    // while brokers 1 and 2 can confirm, although its reconnect backoff
    // ends several times during the checks.
    let hung = Arc::new(AtomicBool::new(false));
    let hold = {
        let hung = hung.clone();
        Arc::new(move |header: &RequestHeader, body: &Bytes| {
            if is_confirmation(header, body) {
                hung.store(true, Ordering::SeqCst);
            }
            if hung.load(Ordering::SeqCst) {
                Duration::from_secs(60)
            } else {
                Duration::ZERO
            }
        }) as Delay
    };
    let at_once = || Arc::new(|_: &RequestHeader, _: &Bytes| Duration::ZERO) as Delay;
    let brokers = scripted_brokers_delayed(
        &[(7, 2), (7, 2), (7, 2)],
        Arc::new(AtomicUsize::new(1)),
        vec![hold, at_once(), at_once()],
    )
    .await;
    let confirmations_to_0 = || {
        brokers[0].requests(ApiKey::FindCoordinator).len()
            + brokers[0].requests(ApiKey::Metadata).len()
    };
    let mut config = ClientConfig::new([brokers[2].addr.as_str()]);
    config.request_timeout = Duration::from_millis(300);
    config.operation_timeout = Duration::from_secs(8);
    let client = KafkaClient::new(config).unwrap();
    client.metadata().refresh_metadata(&[]).await.unwrap();
    client.state().learn(Lesson::CoordinatorFound {
        key: "r",
        broker: &Broker {
            id: 1,
            addr: brokers[1].addr.clone(),
        },
    });
    // Lone checks until one's confirmation went to broker 0 (each goes to
    // 0 or 2 at random while 0 is sound), then past its request timeout.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !hung.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "no confirmation went to broker 0"
        );
        client
            .describer()
            .describe_transaction("r")
            .await
            .unwrap()
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let before = confirmations_to_0();
    let until = Instant::now() + Duration::from_secs(3);
    let mut checks = 0;
    while Instant::now() < until {
        let answer = client
            .describer()
            .describe_transaction("r")
            .await
            .unwrap()
            .unwrap();
        assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2));
        checks += 1;
    }
    assert!(checks > 10, "only {checks} checks in 3 s");
    assert_eq!(
        confirmations_to_0() - before,
        0,
        "the hung broker was asked to confirm again ({checks} checks)"
    );
}

#[tokio::test]
async fn a_broker_whose_metadata_is_behind_is_never_asked_to_look_up_or_confirm() {
    let behind = Arc::new(AtomicBool::new(true));
    let brokers = one_cut_off(behind.clone()).await;
    let (x, y) = (brokers[0].addr.clone(), brokers[1].addr.clone());
    let refusals = Arc::new(Refusals::default());
    let mut config = ClientConfig::new([x.as_str()]);
    config.request_timeout = Duration::from_secs(5);
    config.operation_timeout = Duration::from_secs(8);
    config.observer = Some(refusals.clone());
    let client = KafkaClient::new(config).unwrap();
    // Bootstrapped from X: its metadata is all the client knows ...
    client.metadata().refresh_metadata(&[]).await.unwrap();
    assert!(client.state().epochs().stale().is_empty());
    // ... until another broker names the newer leader: X was deposed.
    client
        .metadata()
        .metadata_from(&y, vec!["__transaction_state".into()])
        .await
        .unwrap();
    assert_eq!(
        client
            .state()
            .epochs()
            .stale()
            .iter()
            .map(|(a, _)| a)
            .collect::<Vec<_>>(),
        [&x],
        "the deposed leader is stale"
    );
    let asked_before = brokers[0].requests(ApiKey::FindCoordinator).len();
    let ids: Vec<String> = (0..60).map(|i| format!("role-{i}")).collect();
    for id in &ids {
        let answer = client
            .describer()
            .describe_transaction(id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2), "{id}");
    }
    // All at once: one batch, confirmed by a Metadata request of
    // `__transaction_state` (more than two ids).
    all_described_as(&client, &ids, (7, 2)).await;
    assert_eq!(
        brokers[0].requests(ApiKey::FindCoordinator).len(),
        asked_before,
        "no lookup or confirmation went to the stale broker"
    );
    let confirmations = refusals.1.lock().unwrap().clone();
    assert!(
        confirmations.iter().all(|(addr, _)| *addr != x),
        "a confirmation went to the stale broker: {confirmations:?}"
    );
    assert!(
        confirmations.iter().any(|(_, n)| *n == 1),
        "lone checks confirmed"
    );
    assert!(confirmations.iter().any(|(_, n)| *n > 2), "by Metadata too");
    assert!(brokers[0].requests(ApiKey::DescribeTransactions).is_empty());
    assert_eq!(refusals.0.load(Ordering::SeqCst), 0, "no answer refused");

    // Refreshes never take X's metadata, and probe it meanwhile; once it
    // has caught up, it is asked again.
    let probes = || brokers[0].requests(ApiKey::Metadata).len();
    let before = probes();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        client.metadata().refresh_metadata(&[]).await.unwrap();
    }
    assert!(probes() > before, "the stale broker was probed");
    assert_eq!(client.state().epochs().stale().len(), 1, "still behind");
    behind.store(false, Ordering::SeqCst);
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        client.metadata().refresh_metadata(&[]).await.unwrap();
    }
    assert!(client.state().epochs().stale().is_empty(), "caught up");
}

#[tokio::test]
async fn a_round_waits_for_its_describes_so_the_next_takes_every_batch() {
    // Brokers 0-2 each coordinate a third of the ids (partition p of
    // `__transaction_state` led by broker p) and answer describes in 60, 66
    // and 72 ms; broker 3 coordinates nothing, so it confirms every round,
    // in 40 ms. A round that went on as soon as its confirmation returned
    // would find every describe still in flight, and the describes,
    // returning one by one, went in rounds of one or two batches: 0.67
    // confirmations per describe (three runs). A round that waits for its
    // describes too (as long again as its confirmation took, at most) takes
    // the batches of the two coordinators that answered first; the third's
    // checks, answered in the same instant, queue just after it: 0.51.
    let brokers = partition_leaders(4, |b| {
        Arc::new(move |header: &RequestHeader, body: &Bytes| {
            if header.request_api_key == ApiKey::DescribeTransactions as i16 {
                Duration::from_millis(60 + 6 * b as u64)
            } else if is_confirmation(header, body) {
                Duration::from_millis(40)
            } else {
                Duration::ZERO
            }
        }) as Delay
    })
    .await;
    let client = client(&[&brokers[3].addr]);
    client.metadata().refresh_metadata(&[]).await.unwrap();
    // Eight ids per coordinator, each checked in a loop of its own.
    let mut ids: Vec<(String, usize)> = Vec::new();
    for n in 0.. {
        let id = format!("role-{n}");
        let p = crate::describe::partition_for(&id, 3);
        if ids.iter().filter(|(_, q)| *q == p).count() < 8 {
            learn_coordinator(&client, &brokers, &id, p);
            ids.push((id, p));
        }
        if ids.len() == 24 {
            break;
        }
    }
    // One check per coordinator first: the first describe on a connection
    // asks what its broker leads too (held 40 ms here as a confirmation),
    // and the loops would start out of step.
    let first: Vec<&str> = [0, 1, 2]
        .iter()
        .filter_map(|p| ids.iter().find(|(_, q)| q == p).map(|(id, _)| id.as_str()))
        .collect();
    let describer = client.describer();
    futures::future::join_all(first.iter().map(|id| describer.describe_transaction(id))).await;
    let until = Instant::now() + Duration::from_secs(2);
    let loops = ids.into_iter().map(|(id, _)| {
        let client = client.clone();
        async move {
            let mut checks = 0;
            while Instant::now() < until {
                let answer = client
                    .describer()
                    .describe_transaction(&id)
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2));
                checks += 1;
            }
            checks
        }
    });
    let checks: usize = futures::future::join_all(loops).await.into_iter().sum();
    let count = |f: &dyn Fn(&FakeBroker) -> usize| brokers.iter().map(f).sum::<usize>();
    let describes = count(&|b| b.requests(ApiKey::DescribeTransactions).len());
    let confirmations = count(&|b| {
        b.requests(ApiKey::FindCoordinator).len()
            + b.requests(ApiKey::Metadata)
                .into_iter()
                .filter(|(v, body)| {
                    let asked: MetadataRequest = request(*v, body.clone());
                    asked.topics.is_some_and(|t| !t.is_empty())
                })
                .count()
    });
    assert!(checks > 200, "only {checks} checks");
    assert!(
        confirmations * 5 < describes * 3,
        "{confirmations} confirmations for {describes} describes ({checks} checks)"
    );
}

/// The round loop goes on while a coordinator's checks are ready, whether
/// or not a confirmation still waits: a lone check of a coordinator the
/// client knows is sent, and a check queued while that coordinator's
/// describe is in flight, too few to start a round beside it, goes in the
/// next round as soon as the describe returns. With the loop going on only
/// when both held (cargo-mutants, `||` as `&&` in `DescribeQueues::go_on`)
/// the lone check was never sent (its caller gave up after 8 s); the other
/// tests' clients had a lookup's confirmation waiting.
#[tokio::test]
async fn a_check_goes_in_a_round_whether_or_not_a_confirmation_waits() {
    let brokers = partition_leaders(3, |_| {
        Arc::new(|header: &RequestHeader, _: &Bytes| {
            match header.request_api_key == ApiKey::DescribeTransactions as i16 {
                true => Duration::from_millis(100),
                false => Duration::ZERO,
            }
        }) as Delay
    })
    .await;
    let client = client(&[&brokers[1].addr]);
    client.metadata().refresh_metadata(&[]).await.unwrap();
    let ids: Vec<String> = (0..)
        .map(|n| format!("role-{n}"))
        .filter(|id| crate::describe::partition_for(id, 3) == 0)
        .take(4)
        .collect();
    for id in &ids {
        learn_coordinator(&client, &brokers, id, 0);
    }
    let describer = client.describer();
    let lone = tokio::time::timeout(
        Duration::from_secs(2),
        describer.describe_transaction(&ids[0]),
    );
    let lone = lone.await.expect("a lone check was not sent");
    assert_eq!(lone.unwrap().unwrap().producer_epoch, 2);
    let three =
        futures::future::join_all(ids[..3].iter().map(|id| describer.describe_transaction(id)));
    let late = async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let asked = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            describer.describe_transaction(&ids[3]),
        )
        .await;
        (answer, asked.elapsed())
    };
    let (answers, (late, took)) = tokio::join!(three, late);
    for answer in answers {
        assert_eq!(answer.unwrap().unwrap().producer_epoch, 2);
    }
    let late = late.unwrap_or_else(|_| panic!("the queued check was not sent: {took:?}"));
    assert_eq!(late.unwrap().unwrap().producer_epoch, 2);
    assert!(
        took < Duration::from_millis(500),
        "the queued check took {took:?}"
    );
}

#[tokio::test]
async fn across_a_network_a_check_waits_for_no_round_trip_but_its_own() {
    // Three brokers, each the coordinator of a third of the ids and a
    // confirming broker for the others, 20 ms of round trip away (answers
    // pipelined, as across a network). 24 callers each check, spend 1-3 ms
    // on the answer (as a caller writes its data), and check again. A
    // round leaves the confirming broker's batch for the next one, and the
    // answers come back spread, so the checks fall into groups. With one
    // round in flight at a time, a group that misses a round waits for it
    // to return, then for its own: 2.05-2.06 round trips a check (three
    // runs, 0.125 describes a check). Rounds that overlap once as many
    // checks wait as the rounds in flight carry send each group when it is
    // complete: 1.28-1.40 round trips (four runs), 0.14-0.17 describes a
    // check.
    let round_trip = Duration::from_millis(20);
    let brokers = partition_leaders_across(3, round_trip).await;
    let client = client(&[&brokers[0].addr]);
    client.metadata().refresh_metadata(&[]).await.unwrap();
    let mut ids: Vec<String> = Vec::new();
    for n in 0.. {
        let id = format!("role-{n}");
        let p = crate::describe::partition_for(&id, 3);
        if ids
            .iter()
            .filter(|i| crate::describe::partition_for(i, 3) == p)
            .count()
            < 8
        {
            learn_coordinator(&client, &brokers, &id, p);
            ids.push(id);
        }
        if ids.len() == 24 {
            break;
        }
    }
    let until = Instant::now() + Duration::from_secs(3);
    let loops = ids.into_iter().enumerate().map(|(n, id)| {
        let client = client.clone();
        async move {
            let mut took = Vec::new();
            while Instant::now() < until {
                let asked = Instant::now();
                let answer = client
                    .describer()
                    .describe_transaction(&id)
                    .await
                    .unwrap()
                    .unwrap();
                took.push(asked.elapsed());
                assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2));
                tokio::time::sleep(Duration::from_millis(1 + (n % 3) as u64)).await;
            }
            took
        }
    });
    let took: Vec<Duration> = futures::future::join_all(loops)
        .await
        .into_iter()
        .flatten()
        .collect();
    // The first second settles the rounds (and learns their round trip).
    let settled = &took[took.len() / 3..];
    let mean = settled.iter().sum::<Duration>() / settled.len() as u32;
    let describes: usize = brokers
        .iter()
        .map(|b| b.requests(ApiKey::DescribeTransactions).len())
        .sum();
    let per_check = describes as f64 / took.len() as f64;
    let trips = mean.as_secs_f64() / round_trip.as_secs_f64();
    eprintln!(
        "{} checks, mean {mean:?} ({trips:.2} round trips), {per_check:.3} describes a check",
        took.len()
    );
    assert!(
        trips < 1.65,
        "a check took {trips:.2} round trips on average"
    );
    assert!(
        per_check < 0.25,
        "{per_check:.3} describes a check: the batches fell apart"
    );
}

#[tokio::test]
async fn a_lone_describe_of_a_hung_coordinator_holds_no_other_check() {
    // Partition p of `__transaction_state` is led by broker p; broker 1
    // holds its describes a minute (hung), the others answer at once. A
    // lone check of an id of broker 1 goes out with its confirmation, which
    // returns; its describe must not hold the round loop until the request
    // timeout: a check of an id of broker 2 sent meanwhile is answered at
    // once.
    let brokers = partition_leaders(3, |b| {
        Arc::new(move |header: &RequestHeader, _: &Bytes| {
            if b == 1 && header.request_api_key == ApiKey::DescribeTransactions as i16 {
                Duration::from_secs(60)
            } else {
                Duration::ZERO
            }
        }) as Delay
    })
    .await;
    let mut config = ClientConfig::new([brokers[0].addr.as_str()]);
    config.request_timeout = Duration::from_secs(3);
    config.operation_timeout = Duration::from_secs(8);
    let client = KafkaClient::new(config).unwrap();
    client.metadata().refresh_metadata(&[]).await.unwrap();
    let id_of = |p: usize| {
        (0..)
            .map(|n| format!("role-{n}"))
            .find(|id| crate::describe::partition_for(id, 3) == p)
            .unwrap()
    };
    let (hung, live) = (id_of(1), id_of(2));
    learn_coordinator(&client, &brokers, &hung, 1);
    learn_coordinator(&client, &brokers, &live, 2);
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { client.describer().describe_transaction(&hung).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let answer = client
        .describer()
        .describe_transaction(&live)
        .await
        .unwrap()
        .unwrap();
    let took = started.elapsed();
    assert_eq!((answer.producer_id, answer.producer_epoch), (7, 2));
    assert!(
        took < Duration::from_secs(1),
        "a check of a live coordinator waited {took:?} behind a hung one's describe"
    );
    waiting.abort();
}

/// Issue 44 (1): a client that has not learned the cluster's size yet (a
/// new one, as `krabka-authority check` makes) bootstrapped from a broker
/// cut off from the controller: that broker names itself the coordinator
/// and answers the deposed pair; its own metadata lists three brokers.
/// Before, "no Metadata answer yet" counted as one broker and the deposed
/// pair was used unconfirmed.
#[tokio::test]
async fn a_new_client_bootstrapped_from_a_cut_off_broker_never_takes_its_answer_unconfirmed() {
    let brokers = one_cut_off(Arc::new(AtomicBool::new(true))).await;
    for ids in [
        vec!["r".to_owned()],
        (0..5).map(|i| format!("r{i}")).collect(),
    ] {
        let fresh = client(&[&brokers[0].addr]);
        let deadline = Instant::now() + Duration::from_secs(5);
        let answers = fresh
            .describer()
            .describe_transactions(&ids, &|_, _| None, deadline)
            .await;
        for id in &ids {
            let d = answers[id].as_ref().unwrap().as_ref().unwrap();
            assert_eq!((d.producer_id, d.producer_epoch), (7, 2), "{id}");
        }
        let lone = client(&[&brokers[0].addr]);
        let d = lone
            .describer()
            .describe_transaction("r")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (d.producer_id, d.producer_epoch),
            (7, 2),
            "one id, one attempt"
        );
    }
}

/// A single broker whose metadata says so has no other broker to confirm
/// its answers: each batch is confirmed on a connection opened for it, to
/// the broker's own address, one request besides the describe.
#[tokio::test]
async fn one_broker_is_confirmed_on_a_connection_of_its_own() {
    let addr: Arc<std::sync::Mutex<String>> = Arc::default();
    let broker = {
        let addr = addr.clone();
        FakeBroker::start(Arc::new(move |header, body| {
            let addr = addr.lock().unwrap().clone();
            match ApiKey::try_from(header.request_api_key).unwrap() {
                ApiKey::Metadata => {
                    let partitions = [(0, 1, 3)];
                    let topic = Some(("__transaction_state", &partitions[..]));
                    Some(answer(header, &metadata(&[(1, addr.as_str())], topic)))
                }
                ApiKey::FindCoordinator => Some(answer(
                    header,
                    &naming(request(header.request_api_version, body), |_| (1, &addr)),
                )),
                ApiKey::DescribeTransactions => Some(described(header, body, (4, 0), "Empty")),
                _ => None,
            }
        }))
        .await
    };
    *addr.lock().unwrap() = broker.addr.clone();
    let client = client(&[&broker.addr]);
    let d = client
        .describer()
        .describe_transaction("r")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((d.producer_id, d.producer_epoch), (4, 0));
    assert!(client.state().metadata().single_broker());
    assert_eq!(broker.requests(ApiKey::DescribeTransactions).len(), 1);
    // Every id at once, and again: one describe and one confirmation each.
    let ids: Vec<String> = (0..4).map(|i| format!("r{i}")).collect();
    all_described_as(&client, &ids, (4, 0)).await;
    all_described_as(&client, &ids, (4, 0)).await;
}

/// Issue 52 (2): the same hole as issue 44's on a cluster of one broker
/// (its controllers elsewhere). The broker is replaced behind its address:
/// new connections reach the new process, which leads
/// `__transaction_state`-0 at epoch 6 and answers the new pair 7:2; the
/// client's connection made before still reaches the old process, cut
/// off, which answers 7:1 and says it leads at epoch 4. No other broker
/// can say which process leads. Before, a cluster known to be one broker
/// was never confirmed, and the old process's 7:1 was used for as long as
/// its connection lived.
#[tokio::test]
async fn one_broker_replaced_behind_its_address_is_never_confirmed() {
    let addr: Arc<std::sync::Mutex<String>> = Arc::default();
    let script = |old: bool| {
        let addr = addr.clone();
        Arc::new(move |header: &RequestHeader, body: Bytes| {
            let addr = addr.lock().unwrap().clone();
            let epoch = if old { 4 } else { 6 };
            match ApiKey::try_from(header.request_api_key).unwrap() {
                ApiKey::Metadata => {
                    let partitions = [(0, 1, epoch)];
                    let topic = Some(("__transaction_state", &partitions[..]));
                    Some(answer(header, &metadata(&[(1, addr.as_str())], topic)))
                }
                ApiKey::FindCoordinator => Some(answer(
                    header,
                    &naming(request(header.request_api_version, body), |_| (1, &addr)),
                )),
                ApiKey::DescribeTransactions => {
                    let pair = if old { (7, 1) } else { (7, 2) };
                    Some(described(header, body, pair, "Empty"))
                }
                _ => None,
            }
        }) as crate::fake::Script
    };
    let broker = FakeBroker::start(script(true)).await;
    *addr.lock().unwrap() = broker.addr.clone();
    let client = client(&[&broker.addr]);
    let d = client
        .describer()
        .describe_transaction("r")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((d.producer_id, d.producer_epoch), (7, 1), "before the move");
    assert!(client.state().metadata().single_broker());

    broker.replace_for_new_connections(script(false));
    only_the_new_pair_after_the_move(&client).await;
}

/// Issue 44 (2): node 2 is replaced behind its address (a new process
/// registered with its node id, the address now leading to it): new
/// connections reach the new process, which leads `__transaction_state`-0
/// at epoch 6 and answers the new pair 7:2; the client's connection made
/// before still reaches the old process, cut off, which answers 7:1 and
/// says it leads at epoch 4. Brokers 1 and 3 name node 2 the coordinator,
/// at epoch 6. Before, "node 2" confirmed the old process's answer, for as
/// long as its connection lived.
#[tokio::test]
async fn a_process_replaced_behind_its_node_id_is_never_confirmed() {
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let replaced = Arc::new(AtomicBool::new(false));
    // Node `me`'s script; `old` for node 2's first process.
    let script = |me: i32, old: bool| {
        let (addrs, replaced) = (addrs.clone(), replaced.clone());
        Arc::new(move |header: &RequestHeader, body: Bytes| {
            let addrs = addrs.lock().unwrap().clone();
            let list: Vec<(i32, &str)> = (1..=3).zip(addrs.iter().map(String::as_str)).collect();
            // The old process never learns of the move.
            let epoch = if old || !replaced.load(Ordering::SeqCst) {
                4
            } else {
                6
            };
            match ApiKey::try_from(header.request_api_key).unwrap() {
                ApiKey::Metadata => {
                    let partitions = [(0, 2, epoch)];
                    let topic = Some(("__transaction_state", &partitions[..]));
                    Some(answer(header, &metadata(&list, topic)))
                }
                ApiKey::FindCoordinator => Some(answer(
                    header,
                    &naming(request(header.request_api_version, body), |_| {
                        (2, &addrs[1])
                    }),
                )),
                ApiKey::DescribeTransactions if me == 2 => {
                    let pair = if epoch == 4 { (7, 1) } else { (7, 2) };
                    Some(described(header, body, pair, "Empty"))
                }
                _ => None,
            }
        }) as crate::fake::Script
    };
    let brokers = [
        FakeBroker::start(script(1, false)).await,
        FakeBroker::start(script(2, true)).await,
        FakeBroker::start(script(3, false)).await,
    ];
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    let client = client(&[&brokers[0].addr]);
    let d = client
        .describer()
        .describe_transaction("r")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((d.producer_id, d.producer_epoch), (7, 1), "before the move");

    brokers[1].replace_for_new_connections(script(2, false));
    replaced.store(true, Ordering::SeqCst);
    only_the_new_pair_after_the_move(&client).await;
}

/// After a process was replaced behind its address (now): for 3 s, every
/// describe of `r` answers the new process's 7:2 (the first within 1 s,
/// none the old one's 7:1), then lone ids and many at once alike.
async fn only_the_new_pair_after_the_move(client: &KafkaClient) {
    let moved = Instant::now();
    let mut first_new = None;
    while moved.elapsed() < Duration::from_secs(3) {
        let d = client
            .describer()
            .describe_transaction("r")
            .await
            .unwrap()
            .unwrap();
        match (d.producer_id, d.producer_epoch) {
            (7, 2) => {
                first_new.get_or_insert_with(|| moved.elapsed());
            }
            pair => panic!(
                "the replaced process's {pair:?} was used {:?} after the move",
                moved.elapsed()
            ),
        }
    }
    let took = first_new.expect("the new process's pair");
    assert!(
        took < Duration::from_secs(1),
        "the new pair came {took:?} after the move"
    );
    let ids: Vec<String> = (0..4).map(|i| format!("r{i}")).collect();
    all_described_as(client, &ids, (7, 2)).await;
}

/// Issue 44 (4): the host of the client is suspended (a VM paused, a laptop
/// asleep) while a coordinator's answer is on its way, before another
/// broker's confirmation of it arrives. tokio's clock (CLOCK_MONOTONIC)
/// does not count the suspend; the window must: the coordinator may have
/// been deposed and elected again meanwhile, and its answer (the deposed
/// 7:1 here) is as old as the suspend. Before, the window was measured on
/// tokio's clock and the answer was confirmed.
#[tokio::test]
async fn an_answer_held_across_a_suspend_of_the_host_is_not_confirmed() {
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let describes = Arc::new(AtomicUsize::new(0));
    let script = |me: i32| {
        let (addrs, describes) = (addrs.clone(), describes.clone());
        Arc::new(move |header: &RequestHeader, body: Bytes| {
            let addrs = addrs.lock().unwrap().clone();
            let list: Vec<(i32, &str)> = (0..).zip(addrs.iter().map(String::as_str)).collect();
            match ApiKey::try_from(header.request_api_key).unwrap() {
                ApiKey::Metadata => {
                    let partitions = [(0, 1, 3)];
                    let topic = Some(("__transaction_state", &partitions[..]));
                    Some(answer(header, &metadata(&list, topic)))
                }
                ApiKey::FindCoordinator => Some(answer(
                    header,
                    &naming(request(header.request_api_version, body), |_| {
                        (1, &addrs[1])
                    }),
                )),
                ApiKey::DescribeTransactions if me == 1 => {
                    let first = describes.fetch_add(1, Ordering::SeqCst) == 0;
                    if first {
                        // The client's host sleeps 5 s as this answer goes
                        // out (this test's runtime runs on one thread,
                        // whose clocks the suspend moves).
                        krabka_coordination::time::simulate_suspend(Duration::from_secs(5));
                    }
                    let pair = if first { (7, 1) } else { (7, 2) };
                    Some(described(header, body, pair, "Empty"))
                }
                _ => None,
            }
        }) as crate::fake::Script
    };
    let brokers = [
        FakeBroker::start(script(0)).await,
        FakeBroker::start(script(1)).await,
    ];
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    let client = client(&[&brokers[0].addr]);
    let d = client
        .describer()
        .describe_transaction("r")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (d.producer_id, d.producer_epoch),
        (7, 2),
        "the answer held across the suspend was used"
    );
    assert_eq!(brokers[1].requests(ApiKey::DescribeTransactions).len(), 2);
}

/// Connections `broker` accepted: each begins with a Metadata request for
/// no topic (the cluster id).
fn connections_to(broker: &FakeBroker) -> usize {
    broker
        .requests(ApiKey::Metadata)
        .into_iter()
        .filter(|(v, body)| {
            let asked: MetadataRequest = request(*v, body.clone());
            asked.topics.is_some_and(|t| t.is_empty())
        })
        .count()
}

/// A coordinator that took a partition after it last said what it leads
/// (deposed, caught up and elected again: Kafka unfences a broker at its
/// first heartbeat once caught up, and an election may follow at once):
/// the confirmation names it at the new epoch, and the answer it gave is
/// of its earlier term (the pair another leader superseded meanwhile). It
/// is asked again on the same connection, not reconnected, and the answer
/// of the earlier term is never used: the id is described again (issue
/// 52, finding 3: the code before confirmed it after the re-ask and
/// answered 7:2).
#[tokio::test]
async fn a_coordinator_elected_again_since_it_said_is_asked_again_and_its_earlier_answer_is_not_used()
 {
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let epoch = Arc::new(AtomicUsize::new(1));
    let describes = Arc::new(AtomicUsize::new(0));
    let script = {
        let (addrs, epoch, describes) = (addrs.clone(), epoch.clone(), describes.clone());
        Arc::new(move |header: &RequestHeader, body: Bytes| {
            let addrs = addrs.lock().unwrap().clone();
            let list: Vec<(i32, &str)> = (0..).zip(addrs.iter().map(String::as_str)).collect();
            match ApiKey::try_from(header.request_api_key).unwrap() {
                ApiKey::Metadata => {
                    let partitions = [(0, 1, epoch.load(Ordering::SeqCst) as i32)];
                    let topic = Some(("__transaction_state", &partitions[..]));
                    Some(answer(header, &metadata(&list, topic)))
                }
                ApiKey::FindCoordinator => Some(answer(
                    header,
                    &naming(request(header.request_api_version, body), |_| {
                        (1, &addrs[1])
                    }),
                )),
                // The first two answers are of the first term; from the
                // third on, the coordinator has loaded the newer pair.
                ApiKey::DescribeTransactions => {
                    let n = describes.fetch_add(1, Ordering::SeqCst);
                    let pair = if n < 2 { (7, 2) } else { (7, 3) };
                    Some(described(header, body, pair, "Empty"))
                }
                _ => None,
            }
        }) as crate::fake::Script
    };
    let brokers = [
        FakeBroker::start(script.clone()).await,
        FakeBroker::start(script).await,
    ];
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    let client = client(&[&brokers[0].addr]);
    let d = client
        .describer()
        .describe_transaction("r")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((d.producer_id, d.producer_epoch), (7, 2));
    let asked = brokers[1].requests(ApiKey::Metadata).len();
    // The partition moved away and back: a newer epoch, after broker 1 said.
    epoch.store(3, Ordering::SeqCst);
    let d = client
        .describer()
        .describe_transaction("r")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (d.producer_id, d.producer_epoch),
        (7, 3),
        "the answer of the earlier term was used"
    );
    assert_eq!(
        brokers[1].requests(ApiKey::DescribeTransactions).len(),
        3,
        "described again"
    );
    assert_eq!(
        brokers[1].requests(ApiKey::Metadata).len(),
        asked + 1,
        "asked again"
    );
    assert_eq!(connections_to(&brokers[1]), 1, "on the same connection");
}

/// Issue 52, finding 1: a rack cut from the controllers. Id "r"'s
/// partition of `__transaction_state` is on brokers [0, 1, 2]; broker 3
/// holds no replica of it. Brokers 0 (the deposed coordinator) and 3 are
/// behind and name 0 leader at epoch 5 with the old pair; brokers 1 and 2
/// name the new leader 1 at epoch 6, which holds the new pair. A new
/// client bootstrapped from broker 0 (the CLI) draws its confirming broker
/// among 1, 2 and 3: broker 3's word must back nothing, since it holds no
/// replica that the new pair's acks=all write reached. The code before took
/// it: the old pair in about a third of fresh clients.
#[tokio::test]
async fn a_broker_holding_no_replica_never_confirms_a_deposed_coordinator() {
    let behind = |node: usize| node == 0 || node == 3;
    let brokers = four_brokers(
        move |node| if behind(node) { (0, 5) } else { (1, 6) },
        |node| [Some((7, 1)), Some((7, 2)), None, None][node],
    )
    .await;
    let mut by_3 = 0;
    for _ in 0..24 {
        let client = client(&[&brokers[0].addr]);
        let asked_3 = brokers[3].requests(ApiKey::Metadata).len();
        let d = client
            .describer()
            .describe_transaction("r")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (d.producer_id, d.producer_epoch),
            (7, 2),
            "the deposed coordinator's pair was confirmed"
        );
        by_3 += usize::from(brokers[3].requests(ApiKey::Metadata).len() > asked_3 + 1);
    }
    assert!(by_3 > 0, "no confirmation went to broker 3");
}

/// The missing replicas are asked at once. Four brokers agree: broker 0
/// leads the id's partition, on brokers [0, 1, 2]; broker 3 holds no
/// replica. A fresh client bootstrapped from broker 3 (the CLI) draws its
/// round's confirming broker among 1, 2 and 3; when it is 3, or min.isr is
/// not read yet (1: every replica must speak), the replicas missing are
/// asked beside it, and the one describe is confirmed: never described
/// twice. With the replicas never asked (cargo-mutants: `ask_replicas`
/// answering nothing), each such check was described again.
#[tokio::test]
async fn a_coordinator_short_of_replicas_is_confirmed_by_them_at_once() {
    let brokers = four_brokers(|_| (0, 5), |node| (node == 0).then_some((7, 1))).await;
    let mut by_3 = 0;
    for n in 0..24 {
        let client = client(&[&brokers[3].addr]);
        let described = brokers[0].requests(ApiKey::DescribeTransactions).len();
        let asked_3 = brokers[3].requests(ApiKey::Metadata).len();
        let d = client
            .describer()
            .describe_transaction("r")
            .await
            .unwrap()
            .unwrap();
        assert_eq!((d.producer_id, d.producer_epoch), (7, 1));
        assert_eq!(
            brokers[0].requests(ApiKey::DescribeTransactions).len() - described,
            1,
            "client {n}: described again, its replicas not asked at once"
        );
        by_3 += usize::from(brokers[3].requests(ApiKey::Metadata).len() > asked_3 + 1);
    }
    assert!(by_3 > 0, "no confirmation went to broker 3");
}

/// Four scripted brokers of one cluster, min.insync.replicas 2: id "r"'s
/// partition of `__transaction_state` is on [0, 1, 2] and broker 3 holds no
/// replica. Broker `node` names `view(node)` (leader, leader epoch) in
/// Metadata and that leader in FindCoordinator, and describes `pair(node)`.
async fn four_brokers(
    view: impl Fn(usize) -> (i32, i32) + Copy + Send + Sync + 'static,
    pair: impl Fn(usize) -> Option<(i64, i16)> + Copy + Send + Sync + 'static,
) -> Vec<FakeBroker> {
    let addrs: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let mut brokers = Vec::new();
    for node in 0..4 {
        let addrs = addrs.clone();
        let script = Arc::new(move |header: &RequestHeader, body: Bytes| {
            let addrs = addrs.lock().unwrap().clone();
            let list: Vec<(i32, &str)> = (0..).zip(addrs.iter().map(String::as_str)).collect();
            let (leader, epoch) = view(node);
            match ApiKey::try_from(header.request_api_key).unwrap() {
                ApiKey::Metadata => {
                    let partitions = [(0, leader, epoch)];
                    let topic = Some(("__transaction_state", &partitions[..]));
                    let mut response = metadata(&list, topic);
                    for t in &mut response.topics {
                        for p in &mut t.partitions {
                            p.replica_nodes =
                                [0, 1, 2].map(kafka_protocol::messages::BrokerId).to_vec();
                        }
                    }
                    Some(answer(header, &response))
                }
                ApiKey::FindCoordinator => Some(answer(
                    header,
                    &naming(request(header.request_api_version, body), |_| {
                        (leader, &addrs[leader as usize])
                    }),
                )),
                ApiKey::DescribeConfigs => Some(crate::fake::configs(
                    header,
                    body,
                    &[("min.insync.replicas", "2")],
                )),
                ApiKey::DescribeTransactions => {
                    pair(node).map(|p| described(header, body, p, "Empty"))
                }
                _ => None,
            }
        }) as crate::fake::Script;
        brokers.push(FakeBroker::start(script).await);
    }
    *addrs.lock().unwrap() = brokers.iter().map(|b| b.addr.clone()).collect();
    brokers
}
