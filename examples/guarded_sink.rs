//! A guarded sink, end to end. Two members of a role compete through the
//! leader-election client; each sends its fencing token with every write to
//! a small axum sink whose writes route sits behind `AuthorityGuardLayer`,
//! which asks a running krabka-authority service. The first holder writes;
//! then it resigns (or stops renewing and is fenced) and the second takes
//! over; both keep writing. The deposed member's writes are refused with
//! 409, the new holder's accepted. Prints a summary with counts; exits 1
//! when an accepted write came from a member that was not the authority.
//!
//! ```sh
//! scripts/kafka start                          # prints e.g. 127.0.0.1:40123
//! krabka-authority serve --bootstrap-servers 127.0.0.1:40123 --listen 127.0.0.1:8080 &
//! cargo run --example guarded_sink -- \
//!     --bootstrap-servers 127.0.0.1:40123 --service-url http://127.0.0.1:8080
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::Router;
use axum::extract::{Extension, Json, State};
use axum::http::StatusCode;
use axum::routing::post;
use clap::{Parser, ValueEnum};
use krabka_authority::coordination::FencingToken;
use krabka_authority::kafka::{
    ClientConfig, DEFAULT_TOPIC, KafkaClient, KafkaTransport, TopicSpec, TransportConfig,
};
use krabka_authority::leadership::{self, Options};
use krabka_authority::time::{Clock as _, SystemClock};
use krabka_authority_client::{AuthorityClient, AuthorityGuardLayer, Decision};
use serde::{Deserialize, Serialize};

/// How the first holder leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Failover {
    /// It resigns: clears its lease, and the second takes over at once.
    Resign,
    /// It stops renewing (as if hung); the second takes over at the lease
    /// deadline, and the epoch it mints fences the first.
    Fenced,
}

#[derive(Parser, Clone, Debug)]
#[command(about = "Two members write through an authority-guarded sink across a failover")]
pub(crate) struct Args {
    /// Kafka bootstrap servers, comma-separated host:port.
    #[arg(
        long,
        env = "KRABKA_BOOTSTRAP_SERVERS",
        value_delimiter = ',',
        required = true
    )]
    pub(crate) bootstrap_servers: Vec<String>,
    /// The krabka-authority service the sink's guard asks.
    #[arg(
        long,
        env = "KRABKA_SERVICE_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub(crate) service_url: String,
    /// A bearer token for the service, when it requires one.
    #[arg(long, env = "KRABKA_API_TOKEN", hide_env_values = true)]
    pub(crate) api_token: Option<String>,
    /// The coordination topic, as the service's --topic (created compacted
    /// when missing).
    #[arg(long, env = "KRABKA_TOPIC", default_value = DEFAULT_TOPIC)]
    pub(crate) topic: String,
    /// The role (default: a fresh one per run).
    #[arg(long)]
    pub(crate) role: Option<String>,
    /// Writes per member per phase.
    #[arg(long, default_value_t = 20)]
    pub(crate) writes: u32,
    /// How the first holder leaves.
    #[arg(long, value_enum, default_value_t = Failover::Resign)]
    pub(crate) failover: Failover,
    /// Print the summary as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What one member's writes of one phase came to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Counts {
    pub(crate) sent: u32,
    /// 2xx: the guard found the writer authoritative and the sink stored it.
    pub(crate) accepted: u32,
    /// 409: superseded, vacant or unknown.
    pub(crate) refused: u32,
    /// 503: no verdict in time.
    pub(crate) undecided: u32,
    /// Anything else (a 400 would be a bug of this example).
    pub(crate) other: u32,
    /// Of the refusals, those the guard answered from its memory of
    /// superseded tokens, without asking the service.
    pub(crate) remembered: u32,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.sent += other.sent;
        self.accepted += other.accepted;
        self.refused += other.refused;
        self.undecided += other.undecided;
        self.other += other.other;
        self.remembered += other.remembered;
    }
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Holder {
    pub(crate) member: String,
    pub(crate) token: FencingToken,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Summary {
    pub(crate) role: String,
    pub(crate) failover: Failover,
    pub(crate) first: Holder,
    pub(crate) second: Holder,
    /// From the first holder leaving to the second holding.
    pub(crate) takeover_ms: u64,
    /// The first holder's writes while it held the role.
    pub(crate) before: Counts,
    /// The first holder's writes after the second took over.
    pub(crate) deposed: Counts,
    /// The second holder's writes.
    pub(crate) successor: Counts,
    pub(crate) total: Counts,
    /// Writes the sink stored.
    pub(crate) stored: usize,
    /// Stored writes that did not come from the authority of their phase.
    pub(crate) violations: Vec<String>,
}

/// The body of one write.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Write {
    member: String,
    phase: u8,
    seq: u32,
}

/// What the sink stored: the write and the token the guard admitted.
#[derive(Clone, Debug)]
struct Stored {
    write: Write,
    token: FencingToken,
}

type Store = Arc<Mutex<Vec<Stored>>>;

/// The sink's handler: runs only behind an `authoritative` answer.
async fn store(
    State(store): State<Store>,
    Extension(decision): Extension<Decision>,
    Json(write): Json<Write>,
) -> StatusCode {
    let stored = Stored {
        write,
        token: decision.token,
    };
    store
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(stored);
    StatusCode::CREATED
}

/// A member's transport: its own client, so its own producers.
async fn transport(args: &Args) -> anyhow::Result<Arc<KafkaTransport>> {
    let client = KafkaClient::new(ClientConfig::new(args.bootstrap_servers.iter().cloned()))?;
    let config = TransportConfig {
        topic: args.topic.clone(),
        partitions: None,
        create: Some(TopicSpec::default()),
    };
    Ok(Arc::new(KafkaTransport::connect(client, config).await?))
}

/// Sends `writes` writes of `member` in `phase` with `token`, one after
/// another, and counts the answers.
async fn write_all(
    http: reqwest::Client,
    sink: String,
    role: String,
    member: String,
    token: FencingToken,
    phase: u8,
    writes: u32,
) -> Counts {
    let mut counts = Counts::default();
    for seq in 0..writes {
        let write = Write {
            member: member.clone(),
            phase,
            seq,
        };
        counts.sent += 1;
        let response = http
            .post(&sink)
            .header("Krabka-Role", &role)
            .header("Krabka-Token", token.to_string())
            .json(&write)
            .send()
            .await;
        let Ok(response) = response else {
            counts.other += 1;
            continue;
        };
        let status = response.status();
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        match status.as_u16() {
            200..=299 => counts.accepted += 1,
            409 => {
                counts.refused += 1;
                if body["remembered"] == true {
                    counts.remembered += 1;
                }
            }
            503 => counts.undecided += 1,
            _ => {
                eprintln!("write {seq} of {member}: unexpected {status}: {body}");
                counts.other += 1;
            }
        }
    }
    counts
}

/// Runs the scenario; the summary says what happened.
pub(crate) async fn run(args: Args) -> anyhow::Result<Summary> {
    let role = args
        .role
        .clone()
        .unwrap_or_else(|| format!("guarded-sink-{}", SystemClock.now_ms()));

    // The sink: POST /write behind the guard.
    let mut client = AuthorityClient::builder(&args.service_url).deadline(Duration::from_secs(3));
    if let Some(token) = &args.api_token {
        client = client.bearer_token(token);
    }
    let client = client.build()?;
    let stored: Store = Arc::default();
    let app = Router::new()
        .route("/write", post(store))
        .route_layer(AuthorityGuardLayer::new(client))
        .with_state(stored.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sink = format!("http://{}/write", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    let http = reqwest::Client::new();

    // Short leases, so the fenced variant takes seconds, not minutes.
    let options = Options::default()
        .with_lease_duration(Duration::from_secs(3))
        .with_renew_interval(Duration::from_secs(1))
        .with_challenge_stagger(Duration::from_secs(1));
    let a = leadership::acquire(transport(&args).await?, &role, "member-a", options.clone())
        .await
        .context("member-a takes the role")?;
    let first = Holder {
        member: "member-a".into(),
        token: a.token(),
    };
    let b = {
        let (transport, role, options) = (transport(&args).await?, role.clone(), options.clone());
        tokio::spawn(
            async move { leadership::acquire(transport, &role, "member-b", options).await },
        )
    };

    let before = write_all(
        http.clone(),
        sink.clone(),
        role.clone(),
        first.member.clone(),
        first.token,
        1,
        args.writes,
    )
    .await;

    let left = Instant::now();
    match args.failover {
        Failover::Resign => a.resign().await.context("member-a resigns")?,
        // Renewals stop; the lease lapses at its deadline.
        Failover::Fenced => drop(a),
    }
    let b = b.await?.context("member-b takes over")?;
    let takeover_ms = u64::try_from(left.elapsed().as_millis()).unwrap_or(u64::MAX);
    let second = Holder {
        member: "member-b".into(),
        token: b.token(),
    };

    // Both write now: the deposed one still with its old token.
    let (deposed, successor) = tokio::join!(
        write_all(
            http.clone(),
            sink.clone(),
            role.clone(),
            first.member.clone(),
            first.token,
            2,
            args.writes,
        ),
        write_all(
            http.clone(),
            sink.clone(),
            role.clone(),
            second.member.clone(),
            second.token,
            2,
            args.writes,
        ),
    );
    b.resign().await.context("member-b resigns")?;
    let _ = stop.send(());
    server.await??;

    // Every stored write must come from the authority of its phase.
    let stored = std::mem::take(
        &mut *stored
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let violations = stored
        .iter()
        .filter(|s| {
            let holder = if s.write.phase == 1 { &first } else { &second };
            s.write.member != holder.member || s.token != holder.token
        })
        .map(|s| {
            format!(
                "phase {} write {} of {} under {} was stored",
                s.write.phase, s.write.seq, s.write.member, s.token
            )
        })
        .collect();
    let mut total = Counts::default();
    for counts in [&before, &deposed, &successor] {
        total.add(counts);
    }
    Ok(Summary {
        role,
        failover: args.failover,
        first,
        second,
        takeover_ms,
        before,
        deposed,
        successor,
        total,
        stored: stored.len(),
        violations,
    })
}

impl Summary {
    /// The deposed member had every write refused, nothing was lost or
    /// undecided, and only the authority of the moment was stored.
    pub(crate) fn holds(&self) -> bool {
        self.violations.is_empty()
            && self.deposed.refused == self.deposed.sent
            && self.total.sent == self.total.accepted + self.total.refused + self.total.undecided
            && self.stored == self.total.accepted as usize
    }

    fn print(&self) {
        let line = |label: &str, member: &str, c: &Counts| {
            println!(
                "{label:<20} {member:<9} sent {:>3}: accepted {:>3}, refused {:>3} ({} from the guard's memory), undecided {}",
                c.sent, c.accepted, c.refused, c.remembered, c.undecided
            );
        };
        let how = match self.failover {
            Failover::Resign => "resigned",
            Failover::Fenced => "stopped renewing",
        };
        println!(
            "role {}: {} held it with {}, {how}; {} took over with {} after {} ms",
            self.role,
            self.first.member,
            self.first.token,
            self.second.member,
            self.second.token,
            self.takeover_ms
        );
        line("before the failover", &self.first.member, &self.before);
        line("after the failover", &self.first.member, &self.deposed);
        line("", &self.second.member, &self.successor);
        let t = &self.total;
        println!(
            "total: sent {} = accepted {} + refused {} + undecided {}{}; the sink stored {}",
            t.sent,
            t.accepted,
            t.refused,
            t.undecided,
            if t.other > 0 {
                format!(" (+ {} other)", t.other)
            } else {
                String::new()
            },
            self.stored
        );
        for violation in &self.violations {
            println!("VIOLATION: {violation}");
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let json = args.json;
    match run(args).await {
        Ok(summary) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&summary).unwrap_or_default()
                );
            } else {
                summary.print();
            }
            if summary.holds() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
