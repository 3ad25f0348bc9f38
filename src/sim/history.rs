//! What the observers saw, instant by instant (simulated time since the
//! run began): every check's question and answer, every view, every event
//! of the streams. Equal histories of one seed are what replay means.

use std::time::Duration;

/// Who asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Asker {
    /// `GET /roles/{role}/authority` of the service.
    Service,
    /// An item of `POST /authority/check` of the service.
    Batch,
    /// The `check` subcommand's path: a fresh client, one check.
    Cli,
}

/// A verdict as an answer named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Verdict {
    pub(super) verdict: String,
    pub(super) current: Option<(i64, i16)>,
    pub(super) superseded_by: Option<(i64, i16)>,
    pub(super) cached: bool,
    pub(super) cluster: String,
}

/// How a check was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// A verdict, with its HTTP status (200 or 409; the CLI's as the
    /// service would have it).
    Verdict { status: u16, verdict: Verdict },
    /// No verdict: 503 (or the CLI's "undecided"), with why.
    Unavailable(String),
    /// Anything else: the service unreachable, another status.
    Other(String),
}

/// One check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Check {
    pub(super) asker: Asker,
    pub(super) role: &'static str,
    pub(super) token: (i64, i16),
    pub(super) sent: Duration,
    pub(super) received: Duration,
    pub(super) answer: Answer,
}

/// One roster view (`GET /roles/{role}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct View {
    pub(super) role: &'static str,
    pub(super) sent: Duration,
    pub(super) received: Duration,
    pub(super) status: u16,
    /// `view.offset` and `view.ageMs` of a 200.
    pub(super) offset: Option<i64>,
    pub(super) age_ms: Option<i64>,
    /// What it says of the role: the members in rank order, each with the
    /// offset of its registration, and the lease (member, token).
    pub(super) members: Vec<(String, i64)>,
    pub(super) lease: Option<(String, (i64, i16))>,
}

/// One event of a role's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct StreamEvent {
    pub(super) role: &'static str,
    /// Which stream of the role (it is opened again when it ends).
    pub(super) stream: u32,
    pub(super) received: Duration,
    /// `snapshot`, `reset`, or the change's kind.
    pub(super) kind: String,
    /// The id: offset and cluster.
    pub(super) offset: Option<i64>,
    pub(super) cluster: Option<String>,
    /// A change's `member`, and the `holder` and `token` after it.
    pub(super) member: Option<String>,
    pub(super) holder: Option<String>,
    pub(super) token: Option<(i64, i16)>,
}

/// Everything seen in one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct History {
    pub(super) checks: Vec<Check>,
    pub(super) views: Vec<View>,
    pub(super) events: Vec<StreamEvent>,
}
