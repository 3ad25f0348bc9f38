//! `GET /roles/{role}/events`: Server-Sent Events, one per change of the
//! role's state, with the offset it reflects as the event id.
//!
//! A client that reconnects with `Last-Event-ID` gets every change after
//! that offset from the watcher's per-role history. When the history no
//! longer reaches back that far (or the service restarted), it gets a
//! `reset` event carrying the whole current roster instead, so it never
//! silently misses a change. A new stream starts with a `snapshot` event.
//!
//! Ids name the cluster too (`<offset>@<cluster id>`): a cluster rebuilt
//! behind the bootstrap servers numbers its offsets from 0 again. An id of
//! another cluster (or a bare offset, whose cluster cannot be told) gets a
//! `reset`; a stream open while another cluster starts to answer gets one
//! as soon as the new cluster's partition is read, and nothing of the old
//! cluster after it. So does a stream whose role's partition starts a new
//! history (records deleted before the watcher read them: the partition is
//! read again from its log start).

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
use crate::service::watch::roster::roster;
use crate::service::watch::{History, RoleEvent};

/// An event's id: the offset it reflects and the cluster whose topic holds
/// it (`<offset>@<cluster id>`). A cluster rebuilt behind the same
/// addresses numbers its offsets from 0 again: an id of another cluster
/// cannot be resumed from.
fn id(offset: i64, cluster: Option<&str>) -> String {
    match cluster {
        Some(cluster) => format!("{offset}@{cluster}"),
        None => offset.to_string(),
    }
}

fn change(event: &RoleEvent, cluster: Option<&str>) -> Event {
    Event::default()
        .id(id(event.offset, cluster))
        .event(event.kind.as_str())
        .json_data(event)
        .unwrap_or_else(|_| Event::default().comment("unserializable event"))
}

/// A `snapshot` or `reset` event: the whole roster, with the id of the
/// last offset it includes (so resuming from it misses nothing). A role
/// with no record has the id of the last offset read of its partition: its
/// records up to there (a registration and its removal) are in the
/// nothing, and the changes after it follow, none again.
fn whole(state: &AppState, role: &str, name: &str, cluster: Option<&str>) -> (Event, i64) {
    let stagger = state.stagger_ms();
    match state.watcher.role_as_of(role) {
        Ok((Some(view), _)) => {
            let last = view.offset - 1;
            let body = roster(&view, state.clock.now_ms(), stagger);
            let event = Event::default()
                .id(id(last, cluster))
                .event(name)
                .json_data(&body)
                .unwrap_or_else(|_| Event::default().comment("unserializable roster"));
            (event, last)
        }
        Ok((None, read_to)) => {
            let event = Event::default().event(name).data(format!(
                "{{\"role\":{},\"roster\":null}}",
                serde_json::Value::String(role.to_owned())
            ));
            match read_to.filter(|next| *next > 0) {
                Some(next) => (event.id(id(next - 1, cluster)), next - 1),
                None => (event, -1),
            }
        }
        // Not caught up (cannot happen once a stream started, but after
        // another cluster answered: then no reset is sent before the new
        // one is read). Data, not a comment: a comment must not hold a
        // newline, and clients ignore data-less events.
        Err(why) => (
            Event::default().event(name).data(
                serde_json::json!({ "role": role, "roster": null, "reason": why.to_string() })
                    .to_string(),
            ),
            -1,
        ),
    }
}

/// How often a stream whose cluster was replaced looks whether the new
/// one's partition is read, to send its `reset`.
const SWITCH_LOOK: std::time::Duration = std::time::Duration::from_millis(100);

struct Feed {
    state: Arc<AppState>,
    role: String,
    live: broadcast::Receiver<(History, RoleEvent)>,
    readings: watch::Receiver<u64>,
    closing: watch::Receiver<bool>,
    pending: VecDeque<Event>,
    last: i64,
    /// The history of the role's partition `last` counts offsets in, and
    /// its cluster; `None` once another history began (another cluster,
    /// or records deleted unread), until its `reset` is sent.
    reading: Option<(History, Option<Arc<str>>)>,
}

impl Feed {
    fn cluster(&self) -> Option<&str> {
        self.reading.as_ref().and_then(|(_, c)| c.as_deref())
    }

    /// The role's history now, and its cluster.
    fn current(&self) -> (History, Option<Arc<str>>) {
        (
            self.state.watcher.history_of(&self.role),
            self.state.watcher.cluster(),
        )
    }

    /// Whether a history later than the stream's began.
    fn behind(&self) -> bool {
        self.reading
            .as_ref()
            .is_some_and(|(h, _)| *h < self.state.watcher.history_of(&self.role))
    }

    /// Queues what the client missed after `self.last`: the kept changes,
    /// or a reset when they do not reach back that far.
    fn catch_up(&mut self) {
        if self.behind() {
            // The kept changes are another history's.
            self.switched();
            return;
        }
        let (missed, complete) = self.state.watcher.history(&self.role, self.last);
        if complete {
            for e in &missed {
                self.pending.push_back(change(e, self.cluster()));
                self.last = self.last.max(e.offset);
            }
        } else {
            self.reset();
        }
    }

    /// Queues a `reset` with the whole roster of the reading under way.
    fn reset(&mut self) {
        self.reading = Some(self.current());
        let (event, last) = whole(&self.state, &self.role, "reset", self.cluster());
        self.pending.push_back(event);
        self.last = last;
    }

    /// Another history began: what the client knows is of the old one. The
    /// `reset` follows once the new history's partition is read.
    fn switched(&mut self) {
        self.reading = None;
        self.last = -1;
    }

    async fn next(mut self) -> Option<(Result<Event, Infallible>, Feed)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some((Ok(event), self));
            }
            // Another history began: its reset once its partition is read.
            if self.reading.is_none() && self.state.watcher.role(&self.role).is_ok() {
                self.reset();
                continue;
            }
            let received = {
                let switching = self.reading.is_none();
                let closing = &mut self.closing;
                let live = &mut self.live;
                let readings = &mut self.readings;
                tokio::select! {
                    () = async { let _ = closing.wait_for(|c| *c).await; } => return None,
                    received = live.recv() => Some(received),
                    _ = readings.changed() => None,
                    () = tokio::time::sleep(SWITCH_LOOK), if switching => None,
                }
            };
            let Some(received) = received else {
                if self.behind() {
                    self.switched();
                }
                continue;
            };
            let mine = self.reading.as_ref().map(|(h, _)| *h);
            match received {
                // A later reading's, or a later history of the role's
                // partition (an old one's are dropped with it).
                Ok((history, e))
                    if mine.is_some_and(|h| {
                        h.reading < history.reading || (e.role == self.role && h < history)
                    }) =>
                {
                    self.switched();
                }
                Ok((history, e))
                    if mine == Some(history) && e.role == self.role && e.offset > self.last =>
                {
                    self.last = e.offset;
                    let event = change(&e, self.cluster());
                    return Some((Ok(event), self));
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) if self.reading.is_some() => self.catch_up(),
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

/// Where a stream resumes: after an offset of the cluster read now, or
/// from a `reset`.
fn feed(
    state: Arc<AppState>,
    role: String,
    last_event_id: Option<LastEventId>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    // Subscribe before reading history or state: no change falls between.
    let live = state.watcher.subscribe();
    let readings = state.watcher.readings();
    let closing = state.closing.subscribe();
    let mut feed = Feed {
        state,
        role,
        live,
        readings,
        closing,
        pending: VecDeque::new(),
        last: -1,
        reading: None,
    };
    let now = feed.current();
    match last_event_id {
        // Resumed in the cluster read now: the changes after it.
        Some(LastEventId {
            offset,
            cluster: Some(cluster),
        }) if now.1.as_deref() == Some(cluster.as_str()) => {
            feed.reading = Some(now);
            feed.last = offset;
            feed.catch_up();
        }
        // An offset of another cluster, or of one not named: it cannot be
        // resumed from.
        Some(_) => feed.reset(),
        None => {
            feed.reading = Some(now);
            let (event, last) = whole(&feed.state, &feed.role, "snapshot", feed.cluster());
            feed.pending.push_back(event);
            feed.last = last;
        }
    }
    futures::stream::unfold(feed, Feed::next)
}

/// A `Last-Event-ID`: `<offset>@<cluster id>` as this service writes ids,
/// or a bare offset (of a cluster it cannot tell).
#[derive(Debug, PartialEq, Eq)]
struct LastEventId {
    offset: i64,
    cluster: Option<String>,
}

impl LastEventId {
    fn parse(text: &str) -> Option<LastEventId> {
        let (offset, cluster) = match text.split_once('@') {
            Some((offset, cluster)) => (offset, Some(cluster)),
            None => (text, None),
        };
        let offset = offset.parse::<i64>().ok().filter(|o| *o >= -1)?;
        let cluster = match cluster {
            Some(c) if c.is_empty() || !c.bytes().all(|b| b.is_ascii_graphic()) => return None,
            c => c.map(str::to_owned),
        };
        Some(LastEventId { offset, cluster })
    }
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
        Some(Ok(text)) => match LastEventId::parse(text) {
            Some(id) => Some(id),
            None => {
                return Err(ApiError::invalid(
                    "Last-Event-ID",
                    format!(
                        "{text:?} is not an event id: send the id of the last event received (<offset>@<cluster id>), or no Last-Event-ID for a snapshot first"
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
