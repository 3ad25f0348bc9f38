//! Acquiring a role, holding it with background renewals, and resigning.

use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::LeadershipError;
use super::events::Event;
use super::options::{EventSink, Options};
use krabka_coordination::time::{Clock, millis};
use krabka_coordination::transport::{Transport, TransportError};
use krabka_coordination::{Decision, FencingToken, RoleState, SuccessionConfig, evaluate};

/// Reports transitions to `tracing` and the optional sink.
#[derive(Clone)]
struct Reporter {
    role: Arc<str>,
    member: Arc<str>,
    sink: Option<EventSink>,
}

impl Reporter {
    fn emit(&self, event: Event) {
        match &event {
            Event::RenewFailed { .. } | Event::Fenced { .. } | Event::Lost { .. } => {
                tracing::warn!(role = %self.role, member = %self.member, "{event}");
            }
            // Routine, and frequent: the event sink gets them all.
            Event::Renewed { .. } | Event::Waiting { .. } => {
                tracing::debug!(role = %self.role, member = %self.member, "{event}");
            }
            _ => tracing::info!(role = %self.role, member = %self.member, "{event}"),
        }
        if let Some(sink) = &self.sink {
            sink(&event);
        }
    }
}

fn transport_err(role: &str, source: TransportError) -> LeadershipError {
    LeadershipError::Transport {
        role: role.to_owned(),
        source: Box::new(source),
    }
}

/// Registers `member` for `role`, waits for its turn by the succession
/// rules, mints the epoch and writes the first lease; then renews the lease
/// in the background every renew interval until the role ends.
///
/// Waiting re-reads the role's partition at most every poll interval and
/// sleeps until the member's challenge instant; it never spins. Transport
/// errors while waiting are logged and retried; drop the future to give up
/// (the registration stays until [`Leadership::resign`] or a deregistration).
pub async fn acquire<T>(
    transport: Arc<T>,
    role: &str,
    member: &str,
    options: Options,
) -> Result<Leadership<T>, LeadershipError>
where
    T: Transport + 'static,
{
    let max = transport
        .max_transaction_timeout()
        .await
        .map_err(|e| transport_err(role, e))?;
    options.validate(transport.partitions(), max)?;

    let reporter = Reporter {
        role: role.into(),
        member: member.into(),
        sink: options.events.clone(),
    };
    let clock = options.clock.clone();
    let config = options.succession();
    let poll = options.poll();
    let poll_ms = millis(poll);

    let register = || async {
        let offset = transport
            .register(role, member, clock.now_ms())
            .await
            .map_err(|e| transport_err(role, e))?;
        reporter.emit(Event::Registered { offset });
        Ok::<i64, LeadershipError>(offset)
    };
    let mut my_offset = register().await?;
    let mut vacant_seen: Option<i64> = None;
    let mut last_wait: Option<i64> = None;

    loop {
        let now = clock.now_ms();
        let records = match transport.read_role_records(role).await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(role, member, error = %e, "cannot read the role's partition; retrying");
                clock.sleep_until(now.saturating_add(poll_ms)).await;
                continue;
            }
        };
        let mut state = RoleState::from_records(role, &records);
        if state.lease().is_none() {
            state.observe_vacancy(*vacant_seen.get_or_insert(now));
        } else {
            vacant_seen = None;
        }
        match evaluate(&state, member, now, &config) {
            Decision::Register => {
                // Not in the roster: either the read has not reached our
                // registration yet (an open transaction holds the LSO back),
                // or a tombstone removed it. Register again only for the latter.
                if records.iter().any(|r| r.offset >= my_offset) {
                    my_offset = register().await?;
                }
                clock.sleep_until(now.saturating_add(poll_ms)).await;
            }
            Decision::Wait { until } => {
                if last_wait != Some(until) {
                    last_wait = Some(until);
                    let rank = krabka_coordination::challenge_rank(&state, member);
                    reporter.emit(Event::Waiting { until, rank });
                }
                clock
                    .sleep_until(until.min(now.saturating_add(poll_ms)))
                    .await;
            }
            // Renew without a token: the lease names this member from an
            // earlier life; mint again, which fences that life.
            Decision::Renew { .. } | Decision::Challenge => {
                reporter.emit(Event::Challenged);
                let token = match transport.acquire_epoch(role, options.lease_duration).await {
                    Ok(token) => token,
                    Err(e) => {
                        tracing::warn!(role, member, error = %e, "challenge failed; retrying");
                        clock.sleep_until(now.saturating_add(poll_ms)).await;
                        continue;
                    }
                };
                let granted = clock.now_ms();
                let lease = config.grant(member, token, granted);
                match transport.write_lease(role, token, &lease).await {
                    Ok(_) => {
                        reporter.emit(Event::Acquired { token });
                        reporter.emit(Event::Renewed {
                            deadline: lease.deadline,
                        });
                        return Ok(Leadership::start(
                            transport, token, granted, config, clock, reporter,
                        ));
                    }
                    Err(e) => {
                        // Fenced: a later challenger minted after us; give
                        // its lease time to show before looking again.
                        tracing::info!(role, member, %token, error = %e, "lost the challenge");
                        clock
                            .sleep_until(clock.now_ms().saturating_add(poll_ms))
                            .await;
                    }
                }
            }
        }
    }
}

/// What the handle asks of its renewal task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Run,
    /// The handle was dropped: stop and report the role released.
    Dropped,
    /// The handle resigns: stop and hand the status back to `resign`.
    Resigning,
}

/// A held role. Pass [`Leadership::token`] with every guarded write; the
/// broker fences a write of an older epoch. When [`Leadership::done`]
/// resolves, the role ended and [`Leadership::err`] says why; stop the
/// role's work then. Dropping the handle stops renewals without blocking.
pub struct Leadership<T: Transport + 'static> {
    transport: Arc<T>,
    reporter: Reporter,
    token: FencingToken,
    pub(super) ended: watch::Receiver<Option<LeadershipError>>,
    stop: Option<watch::Sender<Stop>>,
    task: Option<JoinHandle<watch::Sender<Option<LeadershipError>>>>,
}

impl<T: Transport + 'static> std::fmt::Debug for Leadership<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("role", &self.reporter.role)
            .field("member", &self.reporter.member)
            .field("token", &self.token)
            .field("ended", &*self.ended.borrow())
            .finish()
    }
}

impl<T: Transport + 'static> Leadership<T> {
    fn start(
        transport: Arc<T>,
        token: FencingToken,
        granted_at: i64,
        config: SuccessionConfig,
        clock: Arc<dyn Clock>,
        reporter: Reporter,
    ) -> Leadership<T> {
        let (ended_tx, ended) = watch::channel(None);
        let (stop, stop_rx) = watch::channel(Stop::Run);
        let task = tokio::spawn(renew(
            transport.clone(),
            token,
            granted_at,
            config,
            clock,
            reporter.clone(),
            stop_rx,
            ended_tx,
        ));
        Leadership {
            transport,
            reporter,
            token,
            ended,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The token the coordinator minted for this holder.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The role held.
    pub fn role(&self) -> &str {
        &self.reporter.role
    }

    /// The member holding it.
    pub fn member(&self) -> &str {
        &self.reporter.member
    }

    /// Resolves when the role ends (fenced, lost or resigned).
    pub async fn done(&self) {
        let mut ended = self.ended.clone();
        while ended.borrow_and_update().is_none() {
            if ended.changed().await.is_err() {
                return;
            }
        }
    }

    /// Why the role ended; `None` while it is held.
    pub fn err(&self) -> Option<LeadershipError> {
        self.ended.borrow().clone()
    }

    /// Stops renewing, clears the lease with a tombstone under the token (so
    /// rank 0 takes over at once rather than at the deadline) and
    /// deregisters the member. A renewal in flight finishes first, so it
    /// cannot race the tombstone. Returns the fence if the role was already
    /// lost.
    pub async fn resign(mut self) -> Result<(), LeadershipError> {
        let role = self.reporter.role.to_string();
        let member = self.reporter.member.to_string();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Stop::Resigning);
        }
        let ended_tx = match self.task.take() {
            Some(task) => task.await.ok(),
            None => None,
        };
        let previous = self.ended.borrow().clone();
        let cleared = match &previous {
            Some(e @ LeadershipError::Fenced { .. }) => Err(e.clone()),
            _ => match self.transport.clear_lease(&role, self.token).await {
                Ok(_) => Ok(()),
                Err(e) if e.is_fenced() => Err(LeadershipError::Fenced {
                    role: role.clone(),
                    token: self.token,
                    source: Box::new(e),
                }),
                Err(e) => Err(transport_err(&role, e)),
            },
        };
        let deregistered = self
            .transport
            .deregister(&role, &member)
            .await
            .map_err(|e| transport_err(&role, e));
        self.reporter.emit(Event::Resigned);
        if let Some(tx) = ended_tx {
            tx.send_replace(Some(LeadershipError::Resigned { role }));
        }
        cleared.and(deregistered.map(|_| ()))
    }
}

impl<T: Transport + 'static> Drop for Leadership<T> {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Stop::Dropped);
        }
    }
}

/// The holder's renewal loop: a fresh lease every renew interval; a failed
/// renewal is retried sooner; a fence or an unknown outcome ends the role.
#[allow(clippy::too_many_arguments)]
async fn renew<T: Transport>(
    transport: Arc<T>,
    token: FencingToken,
    mut granted_at: i64,
    config: SuccessionConfig,
    clock: Arc<dyn Clock>,
    reporter: Reporter,
    mut stop: watch::Receiver<Stop>,
    ended: watch::Sender<Option<LeadershipError>>,
) -> watch::Sender<Option<LeadershipError>> {
    let role = reporter.role.to_string();
    let retry_ms = (config.renew_interval_ms / 4).max(10);
    let mut due = granted_at.saturating_add(config.renew_interval_ms);
    loop {
        tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop != Stop::Run) => break,
            () = clock.sleep_until(due) => {}
        }
        let now = clock.now_ms();
        let lease = config.grant(&reporter.member, token, now);
        // Not cancelled by a stop: an abandoned transaction would stay open
        // until the coordinator fences it, and a resign needs the token.
        match transport.write_lease(&role, token, &lease).await {
            Ok(_) => {
                granted_at = now;
                due = granted_at.saturating_add(config.renew_interval_ms);
                reporter.emit(Event::Renewed {
                    deadline: lease.deadline,
                });
            }
            Err(e) if e.is_fenced() => {
                reporter.emit(Event::Fenced { token });
                ended.send_replace(Some(LeadershipError::Fenced {
                    role,
                    token,
                    source: Box::new(e),
                }));
                return ended;
            }
            Err(e @ TransportError::Uncertain { .. }) => {
                reporter.emit(Event::Lost {
                    error: e.to_string(),
                });
                ended.send_replace(Some(transport_err(&role, e)));
                return ended;
            }
            Err(e) => {
                reporter.emit(Event::RenewFailed {
                    error: e.to_string(),
                });
                due = now.saturating_add(retry_ms);
            }
        }
    }
    let dropped = *stop.borrow() == Stop::Dropped;
    ended.send_if_modified(|state| {
        if dropped && state.is_none() {
            *state = Some(LeadershipError::Released { role: role.clone() });
            true
        } else {
            false
        }
    });
    ended
}
