//! Members of the leader-election client with short timings (lease 2 s,
//! renew 500 ms, stagger 500 ms), each on a transport of its own.

use std::sync::Arc;
use std::time::Duration;

use krabka_authority::kafka::KafkaTransport;
use krabka_authority::leadership::{Leadership, LeadershipError, Options, acquire};
use tokio::task::JoinHandle;

use super::broker::transport;

pub fn fast_options() -> Options {
    Options::default()
        .with_lease_duration(Duration::from_secs(2))
        .with_renew_interval(Duration::from_millis(500))
        .with_challenge_stagger(Duration::from_millis(500))
}

/// A member still acquiring, in a task of its own.
pub type Pending = JoinHandle<Result<Leadership<KafkaTransport>, LeadershipError>>;

/// Starts `member` acquiring `role` on `topic`.
pub async fn candidate(topic: &str, role: &str, member: &str) -> Pending {
    let t = Arc::new(transport(topic).await);
    let (role, member) = (role.to_owned(), member.to_owned());
    tokio::spawn(async move { acquire(t, &role, &member, fast_options()).await })
}

/// `member` holding `role` on `topic` (acquired within 20 s).
pub async fn holds(topic: &str, role: &str, member: &str) -> Leadership<KafkaTransport> {
    let t = Arc::new(transport(topic).await);
    tokio::time::timeout(
        Duration::from_secs(20),
        acquire(t, role, member, fast_options()),
    )
    .await
    .expect("acquires in time")
    .expect("acquires")
}
