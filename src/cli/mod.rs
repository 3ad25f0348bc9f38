//! The subcommands of the binary, at the edge: each parses its flags, runs
//! on the library and turns the outcome into output and an exit status.

pub(crate) mod demo;
pub(crate) mod offline;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tokio::time::Instant;

use krabka_authority::cluster::Cluster;
use krabka_authority::coordination::{RoleState, Verdict, role_partition};
use krabka_authority::kafka::{KafkaClient, KafkaError};
use krabka_authority::kafka_settings::KafkaSettings;
use krabka_authority::service::check::Checker;
use krabka_authority::service::watch::roster::roster as roster_view;
use krabka_authority::service::watch::{CoordinatorView, RoleView, StatusInputs, status};
use krabka_authority::service::{self, AppState, ServeError, ServiceConfig, SetupError};
use krabka_authority::time::Rfc3339Ms;
use krabka_authority::time::{Clock, SystemClock};
use krabka_authority_types::{parse_token, validate_role};

/// Exit status of a configuration refused before anything started.
pub(crate) const EXIT_CONFIG: u8 = 2;

fn client(kafka: &KafkaSettings) -> Result<KafkaClient, String> {
    let config = kafka.client_config()?;
    KafkaClient::new(config).map_err(|e| e.to_string())
}

/// `serve`: the service, until SIGTERM or SIGINT.
pub(crate) async fn serve(
    config: ServiceConfig,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<ExitCode> {
    if let Err(message) = config.validate() {
        eprintln!("error: invalid configuration: {message}");
        return Ok(ExitCode::from(EXIT_CONFIG));
    }
    let kafka = config.kafka.clone();
    let state = match AppState::new(config) {
        Ok(state) => state,
        Err(SetupError::Config(message)) => {
            eprintln!("error: invalid configuration: {message}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
        // A TLS file that is there but unusable (no certificate, no key):
        // name its flag, as for a missing one.
        Err(SetupError::Kafka(KafkaError::Tls(why))) => {
            let flag = [
                ("--kafka-tls-ca-file", &kafka.kafka_tls_ca_file),
                ("--kafka-tls-cert-file", &kafka.kafka_tls_cert_file),
                ("--kafka-tls-key-file", &kafka.kafka_tls_key_file),
            ]
            .into_iter()
            .find(|(_, path)| {
                path.as_ref()
                    .is_some_and(|p| why.contains(&p.display().to_string()))
            })
            .map_or("--kafka-tls-*", |(flag, _)| flag);
            eprintln!("error: invalid configuration: {flag}: {why}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
        Err(e) => return Err(e).context("cannot set up the service"),
    };
    // The port first: nothing that talks to Kafka may delay it. Kafka is
    // reached in the background; /healthz answers meanwhile and /readyz
    // says why the service is not ready yet. A wrong password or an
    // untrusted certificate still stops the service, with status 2, as soon
    // as Kafka says so (`ServeError::Denied`).
    let addr = state.config.http.listen;
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("error: cannot listen on {addr}: {e}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    match service::run(listener, state, shutdown).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(ServeError::Denied(why)) => {
            eprintln!("error: cannot use Kafka: {why}");
            Ok(ExitCode::from(EXIT_CONFIG))
        }
        Err(e) => Err(e).context("the service failed"),
    }
}

/// `check ROLE TOKEN`: one check through the service's check path; exit 0
/// authoritative, 1 not, 2 undecided.
pub(crate) async fn check(
    kafka: KafkaSettings,
    role: &str,
    token: &str,
) -> anyhow::Result<ExitCode> {
    let token = match validate_role(role).and_then(|()| parse_token(token)) {
        Ok(token) => token,
        Err(problem) => {
            eprintln!("error: {}", problem.detail);
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    let client = match client(&kafka) {
        Ok(client) => client,
        Err(message) => {
            eprintln!("error: invalid configuration: {message}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    let deadline = Instant::now() + client.config().operation_timeout;
    let checker = Checker::new(Arc::new(client), Arc::new(SystemClock), 1, 1024);
    match checker.check(role, token, deadline).await {
        Ok(answer) => {
            println!("{}", serde_json::to_string_pretty(&answer)?);
            Ok(ExitCode::from(u8::from(
                answer.verdict != Verdict::Authoritative,
            )))
        }
        Err(e) => {
            eprintln!("error: could not ask the coordinator: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

/// `roster ROLE`: the role's roster and lease as JSON, read from the topic,
/// with the coordinator's pair (asked now) and the status, as `GET
/// /roles/{role}` has them. One read cannot see failovers over time: the
/// status is never `flapping` here.
pub(crate) async fn roster(
    kafka: KafkaSettings,
    role: &str,
    stagger: Duration,
) -> anyhow::Result<ExitCode> {
    let client = match client(&kafka) {
        Ok(client) => client,
        Err(message) => {
            eprintln!("error: invalid configuration: {message}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    let partitions = client.topics().partition_count(&kafka.topic).await?;
    let partition = role_partition(role, partitions)?;
    let read = client
        .reader()
        .read_committed(&kafka.topic, partition, 0)
        .await?;
    let state = RoleState::from_records(role, &read.records);
    for m in state.malformed() {
        eprintln!(
            "warning: skipped a malformed record at offset {}: {}",
            m.offset, m.error
        );
    }
    if state.is_empty() {
        eprintln!("error: the topic holds no record of role {role:?}");
        return Ok(ExitCode::from(1));
    }
    let deadline = Instant::now() + client.config().operation_timeout;
    let described = client.describe_role(role, &|_, _| None, deadline).await;
    let now = SystemClock.now_ms();
    let coordinator = match described {
        Ok(d) => Some(CoordinatorView {
            current: d.current,
            state: d.state,
            checked_at: Rfc3339Ms(now),
        }),
        Err(e) => {
            eprintln!("warning: could not ask the transaction coordinator: {e}");
            None
        }
    };
    let stagger_ms = krabka_authority::time::millis(stagger);
    let status = status(
        &state,
        &StatusInputs {
            now_ms: now,
            stagger_ms,
            failovers_in_window: 0,
            flapping_threshold: usize::MAX,
            coordinator_vacant: coordinator.as_ref().is_some_and(|c| c.current.is_none()),
        },
    );
    let view = RoleView {
        state: Arc::new(state),
        partition,
        offset: read.next_offset,
        age: Duration::ZERO,
        refreshed_at_ms: now,
        status: Some(status),
        failovers_in_window: 0,
        coordinator,
        skipped: read.skipped,
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&roster_view(&view, now, stagger_ms))?
    );
    Ok(ExitCode::SUCCESS)
}
