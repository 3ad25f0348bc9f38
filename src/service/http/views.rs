//! `GET /roles` and `GET /roles/{role}`: roster views from the compacted
//! topic, with their staleness, as the watcher computes them
//! ([`crate::service::watch::roster`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::extract::Role;
use super::json;
use super::problem::ApiError;
use crate::service::state::AppState;
use crate::service::watch::roster::{RoleSummary, roster, summary};
use crate::service::watch::{NotReady, TopicSearch};

/// The body of `GET /roles`.
#[derive(Debug, Serialize)]
pub(crate) struct RolesList<'a> {
    /// Every role with records, by name.
    pub roles: Vec<RoleSummary<'a>>,
}

/// The view's read position and age, as headers.
pub(super) fn view_headers(headers: &mut HeaderMap, offset: i64, age_ms: u64) {
    headers.insert("x-krabka-view-offset", HeaderValue::from(offset));
    headers.insert("x-krabka-view-age-ms", HeaderValue::from(age_ms));
}

/// `GET /roles/{role}`.
pub(crate) async fn get_role(
    State(state): State<Arc<AppState>>,
    Role(role): Role,
) -> Result<Response, ApiError> {
    let Some(view) = state.watcher.role(&role).map_err(not_ready)? else {
        // "No record" is as old as the partition's view.
        let mut response = ApiError::NotFound {
            field: "role",
            detail: no_record(&state, &role),
        }
        .into_response();
        if let Some((offset, age)) = state.watcher.partition_view(&role) {
            view_headers(response.headers_mut(), offset, age.as_millis() as u64);
        }
        return Ok(response);
    };
    let body = roster(&view, state.clock.now_ms(), state.stagger_ms());
    let mut response = json(StatusCode::OK, &body);
    view_headers(response.headers_mut(), body.view.offset, body.view.age_ms);
    Ok(response)
}

/// `GET /roles`.
pub(crate) async fn list_roles(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let views = state.watcher.all().map_err(not_ready)?;
    let now = state.clock.now_ms();
    // Every partition's, listed roles or not: the list is as old as its
    // oldest partition (a role missing from it may be in that one).
    let oldest = state
        .watcher
        .view_ages()
        .into_iter()
        .filter_map(|(_, age)| age)
        .max()
        .unwrap_or_default();
    let roles = views.iter().map(|v| summary(v, now)).collect();
    let mut response = json(StatusCode::OK, &RolesList { roles });
    response.headers_mut().insert(
        "x-krabka-view-age-ms",
        HeaderValue::from(oldest.as_millis() as u64),
    );
    Ok(response)
}

/// The watcher's views cannot answer yet (the cause logged with the
/// request's id as it is answered).
pub(super) fn not_ready(e: NotReady) -> ApiError {
    e.into()
}

/// What a 404 of `role` says: that no role is registered at all on a
/// fresh cluster, else that the topic holds no record of it.
pub(super) fn no_record(state: &AppState, role: &str) -> String {
    if state.watcher.topic_search() == TopicSearch::Absent {
        format!(
            "no role is registered yet: the coordination topic {} does not exist (the first candidate creates it)",
            state.config.kafka.topic
        )
    } else {
        format!(
            "the coordination topic holds no record of role {role:?}: check its spelling; GET /roles lists every role"
        )
    }
}
