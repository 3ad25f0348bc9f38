//! The `krabka-authority` binary: parse the command line, set up logging,
//! run one subcommand.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio::sync::watch;

use krabka_authority::cli::KafkaArgs;
use krabka_authority::coordination::{RoleState, role_partition};
use krabka_authority::kafka::KafkaClient;
use krabka_authority::leadership::{Clock, SystemClock};
use krabka_authority::service::{self, AppState, ServeArgs};
use krabka_authority::{commands, demo};

/// mimalloc: the service allocates per request (JSON, headers, futures);
/// glibc's malloc took ~12 % of a profile under load, and mimalloc gave
/// 5-10 % more checks per second in an A/B run (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "krabka-authority",
    version,
    about = "Kafka-fenced leadership: authority checks, roster views and a leader-election demo"
)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, env = "KRABKA_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve authority checks, roster views and metrics over HTTP.
    Serve(ServeArgs),
    /// Check a writer's token against the coordinator (exit 0 authoritative, 1 not, 2 undecided).
    Check {
        #[command(flatten)]
        kafka: KafkaArgs,
        /// The role.
        role: String,
        /// The token, <producer id>:<producer epoch>.
        token: String,
    },
    /// Print a role's roster and lease as JSON.
    Roster {
        #[command(flatten)]
        kafka: KafkaArgs,
        /// The role.
        role: String,
        /// The members' challenge stagger, for the challenge instants.
        #[arg(long, default_value = "5s", value_parser = krabka_authority::cli::parse_duration)]
        challenge_stagger: std::time::Duration,
    },
    /// Run N candidates of one or more roles against a broker, logging every transition.
    Demo(demo::DemoArgs),
    /// Print the partition of a role (offline).
    Partition {
        /// The role name.
        role: String,
        /// The topic's partition count.
        #[arg(long)]
        partitions: i32,
    },
    /// Decode a record of __coordination_state from hex (offline).
    Decode {
        /// The key bytes, hex.
        #[arg(long)]
        key: String,
        /// The value bytes, hex; omit for a tombstone.
        #[arg(long)]
        value: Option<String>,
    },
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

/// Flips to true on SIGINT or SIGTERM.
fn shutdown_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {}
            () = term => {}
        }
        tracing::info!("shutdown requested");
        let _ = tx.send(true);
    });
    rx
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Partition { role, partitions } => match commands::partition(&role, partitions) {
            Ok(p) => {
                println!("{p}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Decode { key, value } => match commands::decode(&key, value.as_deref()) {
            Ok(json) => {
                println!("{json:#}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        },
        command => {
            init_logging(cli.log_format);
            match run_async(command) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

fn run_async(command: Command) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        match command {
            Command::Demo(args) => {
                demo::run(args, shutdown_signal())
                    .await
                    .context("demo failed")?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Serve(args) => {
                let config = match args.validate() {
                    Ok(config) => config,
                    Err(message) => {
                        eprintln!("error: invalid configuration: {message}");
                        return Ok(ExitCode::from(2));
                    }
                };
                let state = AppState::new(config).context("cannot set up the service")?;
                // Credentials and TLS trust are checked before serving: a
                // wrong password or an untrusted certificate stops here,
                // clearly; an unreachable broker only delays readiness.
                match state.client.refresh_metadata(&[]).await {
                    Err(e) if e.is_access_error() => {
                        eprintln!("error: cannot use Kafka: {e}");
                        return Ok(ExitCode::from(2));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "Kafka is not reachable yet; serving, not ready")
                    }
                    Ok(()) => {}
                }
                service::serve(state, shutdown_signal()).await?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Check { kafka, role, token } => check(kafka, &role, &token).await,
            Command::Roster {
                kafka,
                role,
                challenge_stagger,
            } => roster(kafka, &role, challenge_stagger).await,
            Command::Partition { .. } | Command::Decode { .. } => Ok(ExitCode::SUCCESS),
        }
    })
}

fn client(kafka: &KafkaArgs) -> anyhow::Result<KafkaClient> {
    let config = kafka
        .client_config()
        .map_err(|m| anyhow::anyhow!("invalid configuration: {m}"))?;
    Ok(KafkaClient::new(config)?)
}

async fn check(kafka: KafkaArgs, role: &str, token: &str) -> anyhow::Result<ExitCode> {
    let parsed = service::authority::validate_role(role)
        .and_then(|()| service::authority::parse_token(token));
    let token = match parsed {
        Ok(token) => token,
        Err(problem) => {
            eprintln!("error: {}", problem.detail);
            return Ok(ExitCode::from(2));
        }
    };
    let client = client(&kafka)?;
    let answer = service::authority::check_once(&client, role, token, SystemClock.now_ms()).await;
    match &answer {
        Ok(a) => println!("{}", serde_json::to_string_pretty(a)?),
        Err(e) => eprintln!("error: could not ask the coordinator: {e}"),
    }
    Ok(ExitCode::from(service::authority::exit_code(&answer)))
}

async fn roster(
    kafka: KafkaArgs,
    role: &str,
    stagger: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    let client = client(&kafka)?;
    let partitions = client.partition_count(&kafka.topic).await?;
    let partition = role_partition(role, partitions)?;
    let read = client.read_committed(&kafka.topic, partition, 0).await?;
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
    let view = service::watcher::RoleView {
        state: std::sync::Arc::new(state),
        partition,
        offset: read.next_offset,
        age: std::time::Duration::ZERO,
        refreshed_at_ms: SystemClock.now_ms(),
        status: None,
        failovers_in_window: 0,
        coordinator: None,
    };
    let body = service::views::roster(&view, SystemClock.now_ms(), stagger.as_millis() as i64);
    println!("{}", serde_json::to_string_pretty(&body)?);
    Ok(ExitCode::SUCCESS)
}
