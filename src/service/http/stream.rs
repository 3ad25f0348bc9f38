//! `GET /roles/{role}/events`: Server-Sent Events, one per change of the
//! role's state, with the offset it reflects as the event id.
//!
//! A client that reconnects with `Last-Event-ID` gets every change after
//! that offset from the watcher's per-role history. When the history no
//! longer reaches back that far (or the service restarted), it gets a
//! `reset` event carrying the whole current roster instead, so it never
//! silently misses a change. A new stream starts with a `snapshot` event.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};

use super::extract::Role;
use super::problem::ApiError;
use super::views::not_ready;
use crate::service::state::AppState;
use crate::service::watch::RoleEvent;
use crate::service::watch::roster::roster;

fn change(event: &RoleEvent) -> Event {
    Event::default()
        .id(event.offset.to_string())
        .event(event.kind.as_str())
        .json_data(event)
        .unwrap_or_else(|_| Event::default().comment("unserializable event"))
}

/// A `snapshot` or `reset` event: the whole roster, with the id of the
/// last offset it includes (so resuming from it misses nothing).
fn whole(state: &AppState, role: &str, name: &str) -> (Event, i64) {
    let stagger = state.stagger_ms();
    match state.watcher.role(role) {
        Ok(Some(view)) => {
            let last = view.offset - 1;
            let body = roster(&view, state.clock.now_ms(), stagger);
            let event = Event::default()
                .id(last.to_string())
                .event(name)
                .json_data(&body)
                .unwrap_or_else(|_| Event::default().comment("unserializable roster"));
            (event, last)
        }
        Ok(None) => (
            Event::default().event(name).data(format!(
                "{{\"role\":{},\"roster\":null}}",
                serde_json::Value::String(role.to_owned())
            )),
            -1,
        ),
        // Not caught up (cannot happen once a stream started: a partition
        // never falls back from caught up). Data, not a comment: a comment
        // must not hold a newline, and clients ignore data-less events.
        Err(why) => (
            Event::default().event(name).data(
                serde_json::json!({ "role": role, "roster": null, "reason": why.to_string() })
                    .to_string(),
            ),
            -1,
        ),
    }
}

struct Feed {
    state: Arc<AppState>,
    role: String,
    live: broadcast::Receiver<RoleEvent>,
    closing: watch::Receiver<bool>,
    pending: VecDeque<Event>,
    last: i64,
}

impl Feed {
    /// Queues what the client missed after `self.last`: the kept changes,
    /// or a reset when they do not reach back that far.
    fn catch_up(&mut self) {
        let (missed, complete) = self.state.watcher.history(&self.role, self.last);
        if complete {
            for e in &missed {
                self.pending.push_back(change(e));
                self.last = self.last.max(e.offset);
            }
        } else {
            let (event, last) = whole(&self.state, &self.role, "reset");
            self.pending.push_back(event);
            self.last = self.last.max(last);
        }
    }

    async fn next(mut self) -> Option<(Result<Event, Infallible>, Feed)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some((Ok(event), self));
            }
            let received = {
                let closing = &mut self.closing;
                let live = &mut self.live;
                tokio::select! {
                    () = async { let _ = closing.wait_for(|c| *c).await; } => return None,
                    received = live.recv() => received,
                }
            };
            match received {
                Ok(e) if e.role == self.role && e.offset > self.last => {
                    self.last = e.offset;
                    return Some((Ok(change(&e)), self));
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => self.catch_up(),
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

fn feed(
    state: Arc<AppState>,
    role: String,
    last_event_id: Option<i64>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    // Subscribe before reading history or state: no change falls between.
    let live = state.watcher.subscribe();
    let closing = state.closing.subscribe();
    let mut feed = Feed {
        state,
        role,
        live,
        closing,
        pending: VecDeque::new(),
        last: -1,
    };
    match last_event_id {
        Some(last) => {
            feed.last = last;
            feed.catch_up();
        }
        None => {
            let (event, last) = whole(&feed.state, &feed.role, "snapshot");
            feed.pending.push_back(event);
            feed.last = last;
        }
    }
    futures::stream::unfold(feed, Feed::next)
}

/// `GET /roles/{role}/events`.
pub(crate) async fn role_events(
    State(state): State<Arc<AppState>>,
    Role(role): Role,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let last = match headers
        .get("last-event-id")
        .map(|v| v.to_str().map(str::trim))
    {
        None => None,
        Some(Ok(text)) => match text.parse::<i64>() {
            Ok(id) if id >= -1 => Some(id),
            _ => {
                return Err(ApiError::invalid(
                    "Last-Event-ID",
                    format!(
                        "{text:?} is not an event id: send the id of the last event received (an offset, -1 or more), or no Last-Event-ID for a snapshot first"
                    ),
                ));
            }
        },
        Some(Err(_)) => {
            return Err(ApiError::invalid(
                "Last-Event-ID",
                "the header is not visible ASCII: send the id of the last event received (an offset, -1 or more)",
            ));
        }
    };
    // The role's partition must be caught up: a snapshot must be whole.
    state.watcher.role(&role).map_err(not_ready)?;
    Ok(Sse::new(feed(state, role, last))
        .keep_alive(KeepAlive::default())
        .into_response())
}
