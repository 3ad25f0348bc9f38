//! The `krabka-authority` binary: parse the command line, set up logging,
//! run one subcommand.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio::sync::watch;

use krabka_authority::kafka_settings::KafkaSettings;
use krabka_authority::service::ServiceConfig;
use krabka_authority::time::parse_duration;

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
    Serve(Box<ServiceConfig>),
    /// Check a writer's token against the coordinator (exit 0 authoritative, 1 not, 2 undecided).
    Check {
        #[command(flatten)]
        kafka: KafkaSettings,
        /// The role.
        role: String,
        /// The token, <producer id>:<producer epoch>.
        token: String,
    },
    /// Print a role's roster and lease as JSON.
    Roster {
        #[command(flatten)]
        kafka: KafkaSettings,
        /// The role.
        role: String,
        /// The members' challenge stagger, for the challenge instants.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        challenge_stagger: std::time::Duration,
    },
    /// Run N candidates of one or more roles against a broker, logging every transition.
    Demo(cli::demo::DemoArgs),
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
    // Colours only on a terminal: a file or a pipe gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

/// Flips to true on SIGINT or SIGTERM. SIGHUP does not stop the process:
/// it is the operator's "reload", and the only file the service reads
/// while running, the API tokens file, is re-read on its own.
fn shutdown_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            let _ = tokio::signal::ctrl_c().await;
            let _ = tx.send(true);
            return;
        };
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = term.recv() => break,
                _ = hup.recv() => {
                    tracing::info!("SIGHUP: nothing to reload (the API tokens file is re-read when it changes); still serving");
                }
            }
        }
        tracing::info!("shutdown requested");
        let _ = tx.send(true);
    });
    rx
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Partition { role, partitions } => match cli::offline::partition(&role, partitions)
        {
            Ok(p) => {
                println!("{p}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(cli::EXIT_CONFIG)
            }
        },
        Command::Decode { key, value } => match cli::offline::decode(&key, value.as_deref()) {
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
    let outcome = runtime.block_on(async move {
        match command {
            Command::Demo(args) => {
                cli::demo::run(args, shutdown_signal())
                    .await
                    .context("demo failed")?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Serve(config) => cli::serve(*config, shutdown_signal()).await,
            Command::Check { kafka, role, token } => cli::check(kafka, &role, &token).await,
            Command::Roster {
                kafka,
                role,
                challenge_stagger,
            } => cli::roster(kafka, &role, challenge_stagger).await,
            Command::Partition { .. } | Command::Decode { .. } => Ok(ExitCode::SUCCESS),
        }
    });
    // Tasks still running (a Kafka connection, a DNS lookup on a blocking
    // thread that takes seconds to give up) must not hold the exit back.
    runtime.shutdown_timeout(EXIT_GRACE);
    outcome
}

/// How long the exit waits for blocking work left behind.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_millis(200);
