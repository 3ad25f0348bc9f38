//! The authority-check service: live verdicts from the transaction
//! coordinator (batched per coordinator, never cached when authoritative),
//! roster views from the compacted topic with a short TTL, Prometheus
//! metrics and the operations endpoints.

pub mod auth;
pub mod authority;
pub mod config;
pub mod describer;
pub mod metrics;
pub mod ops;
pub mod problem;
pub mod role_metrics;
pub mod router;
pub mod server;
pub mod state;
pub mod status;
pub mod status_page;
pub mod stream;
pub mod verdict;
pub mod views;
pub mod watcher;

pub use config::{ServeArgs, ServiceConfig};
pub use router::{ROUTES, router};
pub use server::{ServeError, run, serve};
pub use state::AppState;
pub use verdict::Verdict;
