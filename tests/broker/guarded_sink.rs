//! The guarded sink of `examples/guarded_sink.rs` against the real broker
//! and a real `serve` process: after a failover the deposed member's writes
//! are refused and the new holder's accepted, with exact counts.

use crate::support::broker::{bootstrap, topic};
use crate::support::process::Served;
use crate::support::unique;

/// The example itself, so the test runs exactly its logic.
#[path = "../../examples/guarded_sink.rs"]
#[allow(dead_code)]
mod example;

#[tokio::test(flavor = "multi_thread")]
async fn a_deposed_writer_is_refused_and_the_new_holder_accepted() {
    let topic = topic(3).await;
    let served = Served::start(&topic).await;
    const N: u32 = 20;
    for failover in [example::Failover::Resign, example::Failover::Fenced] {
        let args = example::Args {
            bootstrap_servers: vec![bootstrap()],
            service_url: served.url.clone(),
            api_token: None,
            topic: topic.clone(),
            role: Some(unique("guarded-sink")),
            writes: N,
            failover,
            json: false,
        };
        let summary = example::run(args).await.unwrap();
        eprintln!("{failover:?}: {summary:#?}");
        let counts = |accepted, refused, remembered| example::Counts {
            sent: N,
            accepted,
            refused,
            undecided: 0,
            other: 0,
            remembered,
        };
        assert!(
            summary.second.token.supersedes(&summary.first.token),
            "{summary:?}"
        );
        // Every write of the first holder while it held the role is stored.
        assert_eq!(summary.before, counts(N, 0, 0), "{failover:?}");
        // Every write of the deposed member is refused with 409: the first
        // one by the service's verdict, the rest from the guard's memory.
        assert_eq!(summary.deposed, counts(0, N, N - 1), "{failover:?}");
        assert_eq!(summary.successor, counts(N, 0, 0), "{failover:?}");
        let t = summary.total;
        assert_eq!(
            (t.sent, t.accepted, t.refused, t.undecided),
            (3 * N, 2 * N, N, 0)
        );
        assert_eq!(t.sent, t.accepted + t.refused + t.undecided);
        // The sink stored exactly the accepted writes, each from the member
        // that was authoritative at that moment, under its token.
        assert_eq!(summary.stored, (2 * N) as usize);
        assert!(summary.violations.is_empty(), "{:?}", summary.violations);
        assert!(summary.holds());
    }
    let log = served.log();
    assert!(!log.contains("panicked"), "{log}");
}
