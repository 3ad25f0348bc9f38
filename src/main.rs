//! The `krabka-authority` binary: parse the command line, set up logging,
//! run one subcommand.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio::sync::watch;

use krabka_authority::{commands, demo};

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
            Command::Partition { .. } | Command::Decode { .. } => Ok(ExitCode::SUCCESS),
        }
    })
}
