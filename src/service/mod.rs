//! The authority-check service: live verdicts from the transaction
//! coordinator (batched per coordinator, confirmed, never cached when
//! authoritative), roster views from the compacted topic, Prometheus
//! metrics and the operations endpoints.
//!
//! - [`check`]: the one check path and its caches;
//! - [`watch`]: the watcher of the topic (an I/O shell around a pure role
//!   tracker), per-role metrics and statuses;
//! - [`http`]: routes, extractors, auth, problems, pages;
//! - [`server`]: accepting connections and shutting down;
//! - [`config`]: every setting, defined once; [`api_tokens`]: the API's
//!   bearer tokens, read from the file the settings name.

pub mod api_tokens;
pub mod check;
pub mod config;
pub(crate) mod http;
pub mod metrics;
#[cfg(test)]
mod replaced;
pub mod server;
pub mod state;
pub mod watch;

pub use config::ServiceConfig;
pub use http::pages::{path_segment, role_page};
pub use http::{ROUTES, router};
pub use server::{ServeError, run, serve};
pub use state::{AppState, SetupError};
