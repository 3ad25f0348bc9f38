//! Optional bearer tokens for the API.
//!
//! Tokens are read from a file (one per line; blank lines and `#` comments
//! ignored), typically a mounted Secret, and read again when the file
//! changes, so a rotation needs no restart. Only SHA-256 digests are kept and
//! compared in constant time. A refused request gets the same 401 problem
//! whatever it asked for, so it learns nothing, not even whether a role
//! exists.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::problem::ApiError;
use crate::service::AppState;
use crate::service::config::AuthSettings;
use crate::sync;

type Digests = Arc<Vec<[u8; 32]>>;

/// How often the token file is looked at for changes, at most.
const RECHECK: Duration = Duration::from_secs(1);

/// The accepted tokens and where they come from.
#[derive(Debug)]
pub struct ApiTokens {
    path: PathBuf,
    digests: RwLock<Digests>,
    seen: Mutex<(tokio::time::Instant, Option<SystemTime>)>,
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

fn read(path: &Path) -> Result<(Digests, Option<SystemTime>), String> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the API tokens file {}: {e}", path.display()))?;
    let digests: Vec<[u8; 32]> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| digest(l.as_bytes()))
        .collect();
    if digests.is_empty() {
        return Err(format!(
            "the API tokens file {} holds no token",
            path.display()
        ));
    }
    Ok((Arc::new(digests), modified))
}

impl ApiTokens {
    /// Reads the tokens; an unreadable or empty file is an error.
    pub fn load(path: &Path) -> Result<ApiTokens, String> {
        let (digests, modified) = read(path)?;
        tracing::info!(file = %path.display(), tokens = digests.len(), "API tokens loaded");
        Ok(ApiTokens {
            path: path.to_owned(),
            digests: RwLock::new(digests),
            seen: Mutex::new((tokio::time::Instant::now(), modified)),
        })
    }

    /// Reads the file again if it changed; a file that became unreadable or
    /// empty keeps the tokens loaded before.
    fn refresh(&self) {
        let modified = {
            let mut seen = sync::lock(&self.seen);
            if seen.0.elapsed() < RECHECK {
                return;
            }
            seen.0 = tokio::time::Instant::now();
            let modified = std::fs::metadata(&self.path)
                .and_then(|m| m.modified())
                .ok();
            if modified == seen.1 {
                return;
            }
            modified
        };
        match read(&self.path) {
            Ok((digests, _)) => {
                tracing::info!(file = %self.path.display(), tokens = digests.len(), "API tokens reloaded");
                *sync::write(&self.digests) = digests;
                sync::lock(&self.seen).1 = modified;
            }
            Err(e) => {
                tracing::warn!(error = %e, "API tokens not reloaded; keeping the previous ones")
            }
        }
    }

    /// True when `token` is one of the accepted tokens.
    pub fn accepts(&self, token: &str) -> bool {
        self.refresh();
        let presented = digest(token.as_bytes());
        let digests = sync::read(&self.digests).clone();
        // Every digest is compared, so the time does not say which matched.
        digests
            .iter()
            .fold(subtle::Choice::from(0), |found, d| {
                found | d.ct_eq(&presented)
            })
            .into()
    }
}

/// Who may call a group of routes when API tokens are configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The API and the status page: always a token.
    Api,
    /// `/healthz`: a token with `--protect-healthz`.
    Healthz,
    /// `/readyz`: a token with `--protect-readyz`.
    Readyz,
    /// `/metrics`: a token unless `--public-metrics` (its per-role series
    /// name every role, holder and pair).
    Metrics,
    /// `/openapi.yaml`: never (it holds no secret).
    Open,
}

impl Access {
    /// True when a request to this group needs a token under `settings`.
    pub fn needs_token(self, settings: &AuthSettings) -> bool {
        match self {
            Access::Api => true,
            Access::Healthz => settings.protect_healthz,
            Access::Readyz => settings.protect_readyz,
            Access::Metrics => !settings.public_metrics,
            Access::Open => false,
        }
    }
}

/// The 401 every refused request gets, whatever it asked for.
pub fn unauthorized() -> Response {
    let mut response = ApiError::unauthorized().into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"krabka-authority\""),
    );
    response
}

/// True when tokens are configured and `request` carries none accepted.
pub fn refused(state: &AppState, request: &Request) -> bool {
    let Some(tokens) = &state.api_tokens else {
        return false;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    !presented.is_some_and(|token| tokens.accepts(token))
}

/// The middleware of one group of routes: a request needs an accepted
/// token when the group does. It runs before routing by method, so a
/// refused request learns nothing (no `Allow` header either).
pub async fn require_token(
    State((state, access)): State<(Arc<AppState>, Access)>,
    request: Request,
    next: Next,
) -> Response {
    if access.needs_token(&state.config.auth) && refused(&state, &request) {
        return unauthorized();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_from_the_file_and_follow_its_changes() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let file = dir.join("tokens");
        std::fs::write(&file, "# comment\n\nalpha\n  beta  \n").unwrap();
        let tokens = ApiTokens::load(&file).unwrap();
        assert!(tokens.accepts("alpha"));
        assert!(tokens.accepts("beta"));
        assert!(!tokens.accepts("gamma"));
        assert!(!tokens.accepts(""));
        assert!(!tokens.accepts("# comment"));

        std::fs::write(&file, "gamma\n").unwrap();
        // Force the next look and a different modification time.
        tokens.seen.lock().unwrap().0 -= RECHECK;
        tokens.seen.lock().unwrap().1 = None;
        assert!(tokens.accepts("gamma"));
        assert!(!tokens.accepts("alpha"));

        std::fs::write(&file, "\n# nothing\n").unwrap();
        tokens.seen.lock().unwrap().0 -= RECHECK;
        tokens.seen.lock().unwrap().1 = None;
        assert!(
            tokens.accepts("gamma"),
            "an emptied file keeps the old tokens"
        );
        assert!(ApiTokens::load(&file).is_err());
    }

    #[test]
    fn the_api_always_needs_a_token_and_metrics_unless_made_public() {
        let default = AuthSettings::default();
        assert!(Access::Api.needs_token(&default));
        assert!(Access::Metrics.needs_token(&default));
        assert!(!Access::Healthz.needs_token(&default));
        assert!(!Access::Readyz.needs_token(&default));
        assert!(!Access::Open.needs_token(&default));
        let relaxed = AuthSettings {
            public_metrics: true,
            protect_healthz: true,
            protect_readyz: true,
            ..AuthSettings::default()
        };
        assert!(!Access::Metrics.needs_token(&relaxed));
        assert!(Access::Healthz.needs_token(&relaxed) && Access::Readyz.needs_token(&relaxed));
        assert!(!Access::Open.needs_token(&relaxed));
    }
}
