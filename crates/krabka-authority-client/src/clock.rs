//! The clock the memory's trust window is counted on: Linux's
//! `CLOCK_BOOTTIME`, which never steps and keeps counting while the host is
//! suspended (a VM paused, a laptop asleep). std's and tokio's `Instant`
//! are `CLOCK_MONOTONIC` on Linux, which stops meanwhile: a window counted
//! on it would still look fresh after a suspend of any length.
//!
//! The workspace's `krabka_coordination::time::boot_now` reads the same
//! clock; this crate reads it itself (through rustix, as that one does)
//! rather than pull the leader-election core into every downstream user.

use std::time::Duration;

/// Now on the boot clock, from an arbitrary origin: for ages only, never a
/// timer's deadline. Elsewhere than Linux and Android, std's `Instant`
/// (which may not count a suspend).
pub(crate) fn boot_now() -> Duration {
    host_now() + simulated()
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn host_now() -> Duration {
    use rustix::time::{ClockId, clock_gettime};
    let t = clock_gettime(ClockId::Boottime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn host_now() -> Duration {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed()
}

#[cfg(test)]
thread_local! {
    static SIMULATED: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

#[cfg(test)]
fn simulated() -> Duration {
    SIMULATED.with(std::cell::Cell::get)
}

#[cfg(not(test))]
fn simulated() -> Duration {
    Duration::ZERO
}

/// For tests: this thread's boot clock counts `by` more, as if the host had
/// slept that long just now (tokio's timers and `Instant` do not see it, as
/// they do not see a real suspend). A current-thread runtime's tasks all
/// see it.
#[cfg(test)]
pub(crate) fn simulate_suspend(by: Duration) {
    SIMULATED.with(|s| s.set(s.get() + by));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suspend_counts_on_the_boot_clock_and_not_on_instant() {
        let (instant, boot) = (std::time::Instant::now(), boot_now());
        simulate_suspend(Duration::from_secs(60));
        assert!(boot_now() - boot >= Duration::from_secs(60));
        assert!(instant.elapsed() < Duration::from_secs(60));
        assert!(boot_now() >= boot, "never steps back");
    }
}
