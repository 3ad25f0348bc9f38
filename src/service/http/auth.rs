//! Who may call what: the middleware that asks a group of routes for a
//! bearer token ([`crate::service::api_tokens`] holds the tokens). A refused
//! request gets the same 401 problem whatever it asked for, so it learns
//! nothing, not even whether a role exists.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::ApiError;
use crate::service::config::AuthSettings;
use crate::service::state::AppState;

/// Who may call a group of routes when API tokens are configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
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
    pub(crate) fn needs_token(self, settings: &AuthSettings) -> bool {
        match self {
            Access::Api => true,
            Access::Healthz => settings.protect_healthz,
            Access::Readyz => settings.protect_readyz,
            Access::Metrics => !settings.public_metrics,
            Access::Open => false,
        }
    }
}

/// True when tokens are configured and `request` carries none accepted.
pub(crate) fn refused(state: &AppState, request: &Request) -> bool {
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
pub(crate) async fn require_token(
    State((state, access)): State<(Arc<AppState>, Access)>,
    request: Request,
    next: Next,
) -> Response {
    if access.needs_token(&state.config.auth) && refused(&state, &request) {
        return ApiError::Unauthorized.into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

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
