//! Time, in one place: the clock the leader-election client and the service
//! read (the system clock in production, a manual clock in tests so every
//! wait is driven by hand), and how instants are written (RFC 3339).
//!
//! The lease deadline is a wall-clock instant written by the holder and read
//! by challengers; skew between their clocks moves the failover time by the
//! skew, never the safety (no clock takes part in the fence).
//!
//! Three clocks, each for what it can be trusted with:
//! - the wall clock ([`Clock::now_ms`]) for what is shown and what members
//!   write: it may be stepped, back or forth (NTP, a restored VM);
//! - a clock that never steps and counts the time the host was suspended
//!   ([`Clock::monotonic_ms`], [`boot_now`]: Linux's `CLOCK_BOOTTIME`) for
//!   how old something is and for the windows a guarantee rests on: an
//!   answer held across a suspend is as old as the suspend;
//! - tokio's `Instant` (`CLOCK_MONOTONIC`, which stops while the host is
//!   suspended) for timers and waits only.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// `d` in whole milliseconds, as the epoch-millisecond arithmetic of
/// records and clocks counts (saturating: no duration overflows it).
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// An epoch-millisecond instant as RFC 3339 (UTC, milliseconds). An instant
/// RFC 3339 cannot write (before 1970, after 9999, both possible in a
/// record of the topic) prints as its number instead.
pub fn rfc3339_ms(ms: i64) -> String {
    Rfc3339Ms(ms).to_string()
}

/// An epoch-millisecond instant that displays (and serializes) as
/// [`rfc3339_ms`] does, without an intermediate string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rfc3339Ms(pub i64);

impl std::fmt::Display for Rfc3339Ms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const YEAR_10000_MS: u64 = 253_402_300_800_000;
        let instant = u64::try_from(self.0)
            .ok()
            .filter(|ms| *ms < YEAR_10000_MS)
            .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms)));
        match instant {
            Some(t) => write!(f, "{}", humantime::format_rfc3339_millis(t)),
            None => write!(f, "{}", self.0),
        }
    }
}

impl serde::Serialize for Rfc3339Ms {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Time the host has spent suspended since it booted: Linux's
/// `CLOCK_BOOTTIME` less `CLOCK_MONOTONIC` (zero elsewhere), plus what this
/// thread's tests [`simulate_suspend`]ed; on a thread that runs a
/// simulation ([`simulate_host`]), only the latter.
pub fn suspended() -> Duration {
    let simulated = SIMULATED.with(std::cell::Cell::get);
    if SIMULATION.with(std::cell::Cell::get) {
        simulated
    } else {
        host_suspended() + simulated
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn host_suspended() -> Duration {
    use rustix::time::{ClockId, clock_gettime};
    let at = |clock| {
        let t = clock_gettime(clock);
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        )
    };
    // The two clocks are read one after the other: a thread preempted
    // between the reads sees less suspended time than there was, by the
    // time it waited. The largest reading so far is the truth (suspended
    // time only grows), so `boot_now` never steps back by a preemption.
    static LARGEST_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let read = at(ClockId::Boottime).saturating_sub(at(ClockId::Monotonic));
    let read_ns = u64::try_from(read.as_nanos()).unwrap_or(u64::MAX);
    let largest = LARGEST_NS
        .fetch_max(read_ns, Ordering::Relaxed)
        .max(read_ns);
    Duration::from_nanos(largest)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn host_suspended() -> Duration {
    Duration::ZERO
}

thread_local! {
    static SIMULATED: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
    static SIMULATION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// For a simulation: from now on this thread's clocks count only the
/// suspends it simulates, from zero (`on`), or the host's again. A
/// simulated history must not depend on the machine that runs it: the
/// host's suspended time, read from two clocks, moves by how long the
/// thread was preempted between the reads, and so with the machine's load.
pub fn simulate_host(on: bool) {
    SIMULATION.with(|s| s.set(on));
    SIMULATED.with(|s| s.set(Duration::ZERO));
}

/// For tests: this thread's clocks count `by` more of suspended time, as if
/// the host had slept that long just now (tokio's timers do not see it, as
/// they do not see a real suspend). A current-thread runtime's tasks all
/// see it; other threads do not.
pub fn simulate_suspend(by: Duration) {
    SIMULATED.with(|s| s.set(s.get() + by));
}

/// Now, as a tokio `Instant` moved forward by the time the host was
/// suspended so far ([`suspended`]): two such instants are as far apart as
/// the time that really passed between them, suspends included. For
/// measuring only: never a timer's deadline (it lies ahead of tokio's own
/// clock by every suspend since boot).
pub fn boot_now() -> tokio::time::Instant {
    tokio::time::Instant::now() + suspended()
}

/// A boxed future of a clock's sleep.
pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Wall-clock time in epoch milliseconds, and sleeping until an instant.
pub trait Clock: Send + Sync + Debug {
    /// Now, in milliseconds since the Unix epoch: for what is shown and
    /// written, never for how old something is (it may be stepped).
    fn now_ms(&self) -> i64;

    /// Milliseconds on a clock that never steps back and counts suspended
    /// time, from an arbitrary origin: for ages and intervals.
    fn monotonic_ms(&self) -> i64;

    /// Resolves once `now_ms() >= at_ms`.
    fn sleep_until(&self, at_ms: i64) -> Sleep<'_>;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, millis)
    }

    fn monotonic_ms(&self) -> i64 {
        static ORIGIN: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
        let origin = *ORIGIN.get_or_init(boot_now);
        millis(boot_now().saturating_duration_since(origin))
    }

    fn sleep_until(&self, at_ms: i64) -> Sleep<'_> {
        let wait = at_ms.saturating_sub(self.now_ms()).max(0);
        Box::pin(tokio::time::sleep(Duration::from_millis(wait as u64)))
    }
}

/// A clock that moves only when a test moves it.
#[derive(Clone, Debug)]
pub struct ManualClock {
    now: Arc<watch::Sender<i64>>,
    /// [`Clock::monotonic_ms`]: moved by [`ManualClock::advance`] only.
    monotonic: Arc<std::sync::atomic::AtomicI64>,
    sleepers: Arc<AtomicUsize>,
}

impl ManualClock {
    /// A clock standing at `start_ms`.
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock {
            now: Arc::new(watch::Sender::new(start_ms)),
            monotonic: Arc::default(),
            sleepers: Arc::default(),
        }
    }

    /// Moves the clock forward by `by`, waking every sleeper now due.
    pub fn advance(&self, by: Duration) {
        let by = millis(by);
        self.monotonic.fetch_add(by, Ordering::SeqCst);
        self.now.send_modify(|now| *now = now.saturating_add(by));
    }

    /// Steps the wall clock back by `by` (an NTP step, a VM restored from
    /// a snapshot): [`Clock::monotonic_ms`] does not move.
    pub fn step_back(&self, by: Duration) {
        let by = millis(by);
        self.now.send_modify(|now| *now = now.saturating_sub(by));
    }

    /// Sets the clock to `at_ms` (never backwards).
    pub fn set(&self, at_ms: i64) {
        self.now.send_modify(|now| *now = (*now).max(at_ms));
    }

    /// How many tasks are asleep on this clock right now.
    pub fn sleepers(&self) -> usize {
        self.sleepers.load(Ordering::SeqCst)
    }

    /// Waits (in real time, yielding) until at least `n` tasks sleep on the
    /// clock, so a test knows its subjects are parked before it moves time.
    pub async fn wait_for_sleepers(&self, n: usize) {
        for _ in 0..10_000 {
            if self.sleepers() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("only {} of {n} tasks went to sleep", self.sleepers());
    }
}

struct Asleep(Arc<AtomicUsize>);

impl Drop for Asleep {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        *self.now.borrow()
    }

    fn monotonic_ms(&self) -> i64 {
        self.monotonic.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, at_ms: i64) -> Sleep<'_> {
        let mut rx = self.now.subscribe();
        let sleepers = self.sleepers.clone();
        Box::pin(async move {
            if *rx.borrow_and_update() >= at_ms {
                return;
            }
            sleepers.fetch_add(1, Ordering::SeqCst);
            let _asleep = Asleep(sleepers);
            while *rx.borrow_and_update() < at_ms {
                if rx.changed().await.is_err() {
                    // The clock is gone; nothing will ever wake us.
                    std::future::pending::<()>().await;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_sleepers_wake_only_when_time_reaches_them() {
        let clock = ManualClock::new(1_000);
        let early = tokio::spawn({
            let c = clock.clone();
            async move { c.sleep_until(1_500).await }
        });
        let late = tokio::spawn({
            let c = clock.clone();
            async move { c.sleep_until(3_000).await }
        });
        clock.wait_for_sleepers(2).await;
        clock.advance(Duration::from_millis(499));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!early.is_finished());
        clock.advance(Duration::from_millis(1));
        early.await.unwrap();
        assert_eq!(clock.sleepers(), 1);
        clock.set(10_000);
        late.await.unwrap();
        assert_eq!(clock.sleepers(), 0);
        assert_eq!(clock.now_ms(), 10_000);
        // A past instant does not sleep at all.
        clock.sleep_until(5).await;
    }

    #[test]
    fn instants_print_as_rfc3339_or_as_numbers_when_out_of_range() {
        assert_eq!(rfc3339_ms(1_700_000_000_000), "2023-11-14T22:13:20.000Z");
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(-5), "-5");
        assert_eq!(rfc3339_ms(i64::MAX), i64::MAX.to_string());
        assert_eq!(rfc3339_ms(253_402_300_800_000), "253402300800000");
        assert_eq!(rfc3339_ms(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    }

    #[tokio::test]
    async fn a_suspend_counts_on_the_boot_clock_and_not_on_tokios() {
        let (tokio_at, boot_at) = (tokio::time::Instant::now(), boot_now());
        let mono = SystemClock.monotonic_ms();
        simulate_suspend(Duration::from_secs(30));
        assert!(boot_now().duration_since(boot_at) >= Duration::from_secs(30));
        assert!(tokio_at.elapsed() < Duration::from_secs(30));
        assert!(SystemClock.monotonic_ms() - mono >= 30_000);
        // Another thread's clocks did not sleep.
        let other = std::thread::spawn(suspended).join().unwrap();
        assert!(other < Duration::from_secs(30));
    }

    #[test]
    fn a_manual_wall_clock_steps_back_and_its_monotonic_clock_does_not() {
        let clock = ManualClock::new(10_000);
        clock.advance(Duration::from_secs(2));
        assert_eq!((clock.now_ms(), clock.monotonic_ms()), (12_000, 2_000));
        clock.step_back(Duration::from_secs(5));
        assert_eq!((clock.now_ms(), clock.monotonic_ms()), (7_000, 2_000));
    }

    #[tokio::test]
    async fn system_clock_sleeps_for_the_difference() {
        let clock = SystemClock;
        let started = tokio::time::Instant::now();
        clock.sleep_until(clock.now_ms() + 30).await;
        assert!(started.elapsed() >= Duration::from_millis(25));
    }
}

/// Parses a human duration such as `500ms`, `3s` or `1m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration ({e}); try 500ms, 3s or 1m"))
}

/// A parser of durations within `min..=max`, for settings: a value outside
/// is refused at start-up, naming the flag, before it can overflow an
/// instant or wait forever.
pub fn duration_between(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text| {
        let value = parse_duration(text)?;
        if value < min || value > max {
            return Err(format!(
                "{text} is outside {} to {}",
                humantime::format_duration(min),
                humantime::format_duration(max)
            ));
        }
        Ok(value)
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn durations_read_like_humans_write_them_and_stay_in_bounds() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert!(
            parse_duration("soon")
                .unwrap_err()
                .contains("not a duration")
        );
        let bounded = duration_between(Duration::from_millis(10), Duration::from_secs(60));
        assert_eq!(bounded("1m"), Ok(Duration::from_secs(60)));
        assert!(bounded("9ms").unwrap_err().contains("outside 10ms to 1m"));
        assert!(bounded("300000000000y").is_err(), "huge values are refused");
    }
}
