//! L1's clock: "is this entry still fresh?" without a serialising clock read on the hit path.
//!
//! A precise monotonic read (`Instant::now()`, `rdtsc` behind a fence in the vDSO) costs tens of
//! nanoseconds on its own, and its fence stops the CPU from overlapping the cache misses of
//! neighbouring lookups, which is where an L1 hit spends its time (the measurements are in
//! `docs/notes/l1-hit-investigation.md`). So a
//! [`Deadline`] keeps two forms of one instant: a *coarse* one, checked against the kernel's
//! coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`: a plain memory read, a few ms of resolution),
//! set [`MARGIN`] early; and the *precise* one. An entry the coarse clock shows well before its
//! deadline is fresh for certain; only entries within `MARGIN` of expiry pay for the precise read.
//! Expiry stays exact to the precise clock. Both forms are 8 bytes (the precise one as a
//! [`Moment`]), so an L1 entry stays small: fewer bytes per entry, fewer cache lines and pages for
//! a hit to miss.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// More than the coarse clock can lag the precise one (one kernel tick, 1–10 ms).
const MARGIN: Duration = Duration::from_millis(25);

/// The coarse clock in coarsetime's ticks (so that [`ticks_of`] converts spans to the same unit).
///
/// On Linux, read through rustix, which calls the vDSO's `clock_gettime` directly: glibc's
/// wrapper around the same call (what coarsetime reads through) adds instructions between two
/// hits' lookups, and a loop of hits pays for every one (the `l1_parts` bench has both reads).
#[cfg(target_os = "linux")]
#[inline]
fn coarse_now() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    // Both fields are within range on a monotonic clock: seconds since boot, nanoseconds < 10^9.
    let (secs, nanos) = (now.tv_sec as u64, now.tv_nsec as u32);
    coarsetime::Duration::new(secs, nanos).as_ticks()
}

/// The coarse clock in coarsetime's ticks.
#[cfg(not(target_os = "linux"))]
#[inline]
fn coarse_now() -> u64 {
    // Not `now()`: that also stores into a process-wide cell, one shared line for every hit.
    coarsetime::Instant::now_without_cache_update().as_ticks()
}

/// An instant of the precise monotonic clock in 8 bytes: nanoseconds since a process-wide origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Moment(u64);

impl Moment {
    /// Now, on the precise clock.
    pub(crate) fn now() -> Self {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        Moment(nanos(Instant::now().saturating_duration_since(origin)))
    }

    /// `span` after this moment (saturating: far enough in the future is "never").
    pub(crate) fn after(self, span: Duration) -> Self {
        Moment(self.0.saturating_add(nanos(span)))
    }

    /// `span` before this moment (saturating at the process-wide origin).
    pub(crate) fn before(self, span: Duration) -> Self {
        Moment(self.0.saturating_sub(nanos(span)))
    }

    /// How long after `earlier` this moment is; zero if it is not after it.
    pub(crate) fn since(self, earlier: Moment) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// The coarse clock now, in its own ticks: a plain memory read, for stamps a few ms may blur (when
/// an L1 entry was last read, the tracking connections' vouch).
#[inline]
pub(crate) fn coarse_ticks() -> u64 {
    coarse_now()
}

/// `span` in coarse-clock ticks (saturating).
pub(crate) fn ticks_of(span: Duration) -> u64 {
    coarsetime::Duration::from(span).as_ticks()
}

fn nanos(span: Duration) -> u64 {
    u64::try_from(span.as_nanos()).unwrap_or(u64::MAX)
}

/// A point in time that the hit path can test cheaply.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    /// Coarse-clock ticks before which the deadline has certainly not passed.
    coarse: u64,
    precise: Moment,
}

impl Deadline {
    /// `life` from now.
    pub(crate) fn after(life: Duration) -> Self {
        Self::early(life, Duration::ZERO)
    }

    /// `life` from now, with the coarse form set `early` sooner still: until then the coarse
    /// clock alone answers "ahead"; from then on, every check reads the precise clock (the early
    /// refresh window, `docs/early-refresh.md`).
    pub(crate) fn early(life: Duration, early: Duration) -> Self {
        // The coarse clock is read first. It never runs ahead of the precise one, so its start
        // is at or before the precise start however long this thread is descheduled between
        // the two reads, and `coarse start + early` is at or before `precise - MARGIN`. (Read
        // the other way round, a stall between the reads longer than MARGIN put the coarse
        // deadline after the precise one: "fresh" past the deadline.)
        let coarse_start = coarse_now();
        let precise = Moment::now().after(life);
        let coarse = match life.checked_sub(MARGIN.saturating_add(early)) {
            Some(early) => {
                coarse_start.saturating_add(coarsetime::Duration::from(early).as_ticks())
            }
            None => 0, // too close to call coarsely: always check precisely
        };
        Deadline { coarse, precise }
    }

    /// The deadline `at`, checked on the precise clock only (a moment already past, as a stale
    /// copy's end of freshness).
    pub(crate) fn at(at: Moment) -> Self {
        Deadline {
            coarse: 0,
            precise: at,
        }
    }

    /// `true` while the deadline has not passed.
    #[inline]
    pub(crate) fn is_ahead(&self) -> bool {
        self.is_surely_ahead() || Moment::now() < self.precise
    }

    /// `true` while the coarse clock alone shows the deadline ahead (and outside any early
    /// window): the hit path's cheap check.
    #[inline]
    pub(crate) fn is_surely_ahead(&self) -> bool {
        self.is_surely_ahead_at(coarse_now())
    }

    /// [`Deadline::is_surely_ahead`] with the coarse clock read at `now` ([`coarse_ticks`]).
    #[inline]
    pub(crate) fn is_surely_ahead_at(&self, now: u64) -> bool {
        now < self.coarse
    }

    /// The precise moment.
    pub(crate) fn moment(&self) -> Moment {
        self.precise
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deadline an hour away is ahead; one in the past, or zero long, is not.
    #[test]
    fn deadlines_pass_exactly() {
        assert!(Deadline::after(Duration::from_secs(3600)).is_ahead());
        assert!(!Deadline::after(Duration::ZERO).is_ahead());
        let start = Instant::now();
        let short = Deadline::after(Duration::from_millis(30));
        while short.is_ahead() {
            std::hint::spin_loop();
        }
        assert!(start.elapsed() >= Duration::from_millis(30), "never early");
    }

    /// An early window moves only the coarse form: inside it the coarse check says no, the
    /// precise one still says ahead.
    #[test]
    fn an_early_window_moves_the_coarse_form_only() {
        let hour = Duration::from_secs(3600);
        assert!(Deadline::early(hour, Duration::from_secs(60)).is_surely_ahead());
        let inside = Deadline::early(hour, hour);
        assert!(!inside.is_surely_ahead() && inside.is_ahead());
        // An early window longer than the life leaves the deadline where it was.
        let whole = Deadline::early(hour, Duration::MAX);
        assert!(whole.moment().since(Moment::now()) > hour / 2 && whole.is_ahead());
    }

    /// The hit path's read is the same clock, in the same unit, as coarsetime's (whose
    /// `Duration` converts every span the deadlines add): it falls between two of coarsetime's.
    #[test]
    fn the_coarse_read_is_coarsetimes_clock() {
        for _ in 0..1000 {
            let before = coarsetime::Instant::now_without_cache_update().as_ticks();
            let read = coarse_ticks();
            let after = coarsetime::Instant::now_without_cache_update().as_ticks();
            assert!(
                before <= read && read <= after,
                "{before} <= {read} <= {after}"
            );
        }
    }
}
