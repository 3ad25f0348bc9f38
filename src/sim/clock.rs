//! The service host's clocks in a simulation: the wall clock runs from the
//! simulation's epoch on the host's own (simulated) time, stepped by the
//! run (an NTP step, a restored VM); the clock of ages and windows is
//! `time::boot_now`, which a simulated suspend moves
//! (`time::simulate_suspend`, on the thread that runs every host).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::time::{Clock, Sleep, boot_now, millis};

/// The wall clock's steps, shared by the run (which steps it) and every
/// clock of the service host.
pub(super) type Steps = Arc<AtomicI64>;

#[derive(Debug)]
pub(super) struct SimClock {
    /// The wall clock when the clock was made (epoch ms), and then.
    base_ms: i64,
    origin: Instant,
    boot_origin: Instant,
    steps: Steps,
}

impl SimClock {
    /// A clock made inside a simulated host.
    pub(super) fn new(steps: Steps) -> SimClock {
        let since_epoch = turmoil::since_epoch().unwrap_or_default();
        SimClock {
            base_ms: millis(since_epoch),
            origin: Instant::now(),
            boot_origin: boot_now(),
            steps,
        }
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        self.base_ms + millis(self.origin.elapsed()) + self.steps.load(Ordering::SeqCst)
    }

    fn monotonic_ms(&self) -> i64 {
        millis(boot_now().saturating_duration_since(self.boot_origin))
    }

    fn sleep_until(&self, at_ms: i64) -> Sleep<'_> {
        let wait = at_ms.saturating_sub(self.now_ms()).max(0);
        Box::pin(tokio::time::sleep(Duration::from_millis(wait as u64)))
    }
}
