//! `krabka-authority demo`: real candidates of one or more roles in one
//! process, logging every transition; with `--chaos`, the holder's renewals
//! are killed at random so failovers keep happening.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use rand::RngExt;
use tokio::sync::watch;

use krabka_authority::kafka::{KafkaClient, KafkaTransport, TopicSpec, TransportConfig};
use krabka_authority::kafka_settings::KafkaSettings;
use krabka_authority::leadership::{Event, LeadershipError, Options, acquire};
use krabka_authority::time::parse_duration;
use krabka_authority::transport::TransportError;

/// Flags of `demo`.
#[derive(Args, Clone, Debug)]
pub(crate) struct DemoArgs {
    #[command(flatten)]
    pub(crate) kafka: KafkaSettings,

    /// Roles to compete for, comma-separated.
    #[arg(
        long,
        env = "KRABKA_DEMO_ROLES",
        value_delimiter = ',',
        default_value = "orders,billing-writer"
    )]
    pub(crate) roles: Vec<String>,

    /// Candidates per role.
    #[arg(long, env = "KRABKA_DEMO_MEMBERS", default_value_t = 3)]
    pub(crate) members: usize,

    /// Partitions of the topic when the demo creates it.
    #[arg(long, env = "KRABKA_DEMO_PARTITIONS", default_value_t = 16)]
    pub(crate) partitions: i32,

    /// Lease duration.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub(crate) lease: Duration,

    /// Renew interval.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub(crate) renew: Duration,

    /// Challenge stagger.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub(crate) stagger: Duration,

    /// Kill a random holder's renewals now and then.
    #[arg(long, env = "KRABKA_DEMO_CHAOS")]
    pub(crate) chaos: bool,

    /// Longest pause between two chaos kills (each pause is random up to this).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) chaos_interval: Duration,

    /// Leave the holders alone this long before chaos starts (scripts/run
    /// waits 3 minutes, so that the token it prints still holds when a
    /// person pastes it).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub(crate) chaos_after: Duration,

    /// Stop after this long (default: run until interrupted).
    #[arg(long = "for", value_parser = parse_duration)]
    pub(crate) run_for: Option<Duration>,
}

/// Why the demo stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    /// Bad flags.
    #[error("{0}")]
    Config(String),
    /// The topic could not be reached or created.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A member failed for good.
    #[error(transparent)]
    Leadership(#[from] LeadershipError),
}

/// Holders currently running, by role: member name and a switch that kills
/// its renewals.
type Holders = Arc<Mutex<HashMap<String, (String, watch::Sender<bool>)>>>;

/// The holders' map, locked: a panic elsewhere leaves it consistent (one
/// insert or retain at a time), so a poisoned lock is taken as it is.
fn held(
    holders: &Holders,
) -> std::sync::MutexGuard<'_, HashMap<String, (String, watch::Sender<bool>)>> {
    holders
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs the demo until `shutdown` flips or `--for` passes.
pub(crate) async fn run(
    args: DemoArgs,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), DemoError> {
    if args.members == 0 || args.roles.iter().any(String::is_empty) {
        return Err(DemoError::Config(
            "need at least one member and non-empty role names".into(),
        ));
    }
    let config = args.kafka.client_config().map_err(DemoError::Config)?;
    let options = Options::default()
        .with_lease_duration(args.lease)
        .with_renew_interval(args.renew)
        .with_challenge_stagger(args.stagger);
    options
        .validate(args.partitions, None)
        .map_err(|e| DemoError::Config(e.to_string()))?;
    let transport_config = TransportConfig {
        topic: args.kafka.topic.clone(),
        partitions: None,
        create: Some(TopicSpec {
            partitions: args.partitions,
            ..TopicSpec::default()
        }),
    };
    // One transport (one producer per role) per member, as separate
    // processes would have.
    let holders: Holders = Arc::default();
    let mut tasks = Vec::new();
    for role in &args.roles {
        for i in 0..args.members {
            let client = KafkaClient::new(config.clone()).map_err(TransportError::from)?;
            // Each member is its own client, as separate processes would be.
            let transport =
                Arc::new(KafkaTransport::connect(client, transport_config.clone()).await?);
            let member = format!("{role}-member-{i}");
            let (log_role, log_member) = (role.clone(), member.clone());
            // The client logs transitions itself; renewals and waits only at
            // debug level, which the demo shows too.
            let options = options.clone().with_events(Arc::new(move |event: &Event| {
                if matches!(event, Event::Renewed { .. } | Event::Waiting { .. }) {
                    tracing::info!(role = %log_role, member = %log_member, "{event}");
                }
            }));
            tasks.push(tokio::spawn(candidate(
                transport,
                role.clone(),
                member,
                options,
                holders.clone(),
            )));
        }
    }
    tracing::info!(roles = ?args.roles, members = args.members, chaos = args.chaos, "demo candidates started");
    if args.chaos {
        tasks.push(tokio::spawn(chaos(
            holders.clone(),
            args.chaos_after,
            args.chaos_interval,
        )));
    }
    let until = async {
        match args.run_for {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = until => {}
        _ = shutdown.wait_for(|s| *s) => {}
    }
    for task in tasks {
        task.abort();
    }
    tracing::info!("demo stopped");
    Ok(())
}

/// One member: acquire, hold until the role ends (or chaos kills its
/// renewals), then come back, which registers it again at the tail.
async fn candidate(
    transport: Arc<KafkaTransport>,
    role: String,
    member: String,
    options: Options,
    holders: Holders,
) {
    loop {
        let leadership = match acquire(transport.clone(), &role, &member, options.clone()).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(%role, %member, error = %e, "cannot compete; retrying in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
        };
        let (kill, mut killed) = watch::channel(false);
        held(&holders).insert(role.clone(), (member.clone(), kill));
        tokio::select! {
            () = leadership.done() => {
                tracing::info!(%role, %member, reason = ?leadership.err().map(|e| e.to_string()), "the role ended");
            }
            // Only a kill that was sent: a replaced holder's entry (and its
            // sender) leaves the map without killing anything.
            () = async {
                if killed.wait_for(|k| *k).await.is_err() {
                    std::future::pending::<()>().await;
                }
            } => {
                tracing::warn!(%role, %member, token = %leadership.token(), "chaos: renewals killed");
                drop(leadership);
                // A dead process comes back after a while.
                tokio::time::sleep(options.lease_duration * 2).await;
            }
        }
        held(&holders).retain(|_, (m, _)| *m != member);
    }
}

async fn chaos(holders: Holders, after: Duration, longest: Duration) {
    let longest_ms = longest.as_millis().max(1000) as u64;
    if !after.is_zero() {
        tracing::info!(?after, "chaos: the holders are left alone for now");
        tokio::time::sleep(after).await;
    }
    loop {
        let pause = rand::rng().random_range(longest_ms / 3..=longest_ms);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let victim = {
            let holders = held(&holders);
            let roles: Vec<&String> = holders.keys().collect();
            if roles.is_empty() {
                continue;
            }
            let role = roles[rand::rng().random_range(0..roles.len())].clone();
            holders.get(&role).map(|(member, kill)| {
                let _ = kill.send(true);
                (role, member.clone())
            })
        };
        if let Some((role, member)) = victim {
            tracing::warn!(%role, %member, "chaos: killing the holder");
        }
    }
}
