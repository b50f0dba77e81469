//! Valkey's clock as this process estimates it, so that a write can carry a deadline that Valkey
//! itself checks.
//!
//! A `put` whose reply did not come within `valkey_timeout` has been answered with an error, but
//! its bytes may still be on the wire (a silent link that heals, a socket that drains after the
//! client reconnected) and land later, over a newer write. So every put carries a deadline on the
//! server's clock — the estimated server time when it was sent plus the timeout — and the put
//! script refuses to write once `TIME` is past it. The estimate is the server's `TIME` from the
//! last put's reply (or the `TIME` read at connect), minus half that round trip, carried forward
//! on this process's monotonic clock: a step of the local wall clock does not move it, and every
//! put refreshes it. Its error is at most about half a round trip, so a put landing within that
//! much of its caller's timeout may still go either way.
//!
//! **Cache life runs on the same clock.** `fresh_until` is compared across processes, so every
//! process reads "now" from this estimate ([`L2::now_ms`](crate::l2::L2::now_ms)), not from its
//! own wall clock: a replica whose clock runs minutes ahead or behind neither sees every copy on
//! Valkey as expired (and reloads it) nor writes copies that others find expired at once. The
//! write scripts stamp `fresh_until` on `TIME` as well, keeping the life the writer gave. The
//! wall clock ([`wall_ms`]) stands in only before the first reading, and for a table without
//! Valkey. The estimate runs on the monotonic clock, which NTP slews with the wall clock, and a
//! reading older than [`REFRESH_AFTER`] is renewed with a `TIME`.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// No estimate yet.
const UNKNOWN: i64 = i64::MIN;

/// How old a reading may grow before it is renewed (a process that only reads makes no put).
pub(crate) const REFRESH_AFTER: Duration = Duration::from_secs(30);

/// How often a missing estimate (no server answered yet) is tried again.
const RETRY_UNKNOWN: Duration = Duration::from_secs(1);

/// An offset added to [`wall_ms`]: `echostore check`'s `skew` fault sets it in one worker to
/// show that no guarantee rests on the processes' wall clocks.
static WALL_OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// This process's wall clock in unix ms (plus any offset [`offset_wall_clock`] set).
pub(crate) fn wall_ms() -> u64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    u64::try_from(ms.saturating_add(WALL_OFFSET_MS.load(Ordering::Relaxed))).unwrap_or(0)
}

/// Makes this process's wall clock, as EchoStore reads it, run `by_ms` ahead (negative: behind).
/// For fault injection (`echostore check --faults skew`); a store built on Valkey no longer
/// reads it once it has heard the server's time.
#[doc(hidden)]
pub fn offset_wall_clock(by_ms: i64) {
    WALL_OFFSET_MS.store(by_ms, Ordering::Relaxed);
}

/// The offset from this process's monotonic clock to Valkey's `TIME`, in ms.
pub(crate) struct ServerClock {
    epoch: Instant,
    /// Server unix ms minus ms since `epoch`; [`UNKNOWN`] before the first reading.
    offset_ms: AtomicI64,
    /// Ms since `epoch` of the last reading.
    read_at_ms: AtomicI64,
    /// A renewal is under way.
    renewing: AtomicBool,
}

/// When a round trip was sent, for [`ServerClock::read`] once its reply came.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent(Instant);

impl ServerClock {
    pub(crate) fn new() -> Self {
        ServerClock {
            epoch: Instant::now(),
            offset_ms: AtomicI64::new(UNKNOWN),
            read_at_ms: AtomicI64::new(0),
            renewing: AtomicBool::new(false),
        }
    }

    /// Marks a round trip that will bring back the server's time.
    pub(crate) fn send(&self) -> Sent {
        Sent(Instant::now())
    }

    /// The reply to the round trip `sent` said the server's time was `server_ms`: taken as the
    /// server's time at the round trip's midpoint.
    pub(crate) fn read(&self, sent: Sent, server_ms: u64) {
        let now = Instant::now();
        let mid = sent.0 + now.saturating_duration_since(sent.0) / 2;
        let since_epoch = ms(mid.saturating_duration_since(self.epoch));
        let offset = i64::try_from(server_ms)
            .unwrap_or(i64::MAX)
            .saturating_sub(since_epoch);
        self.offset_ms.store(offset, Ordering::Relaxed);
        self.read_at_ms.store(since_epoch, Ordering::Relaxed);
    }

    /// Whether this caller should renew the estimate: it is older than [`REFRESH_AFTER`] (or
    /// missing) and no other renewal is under way. The caller then calls [`Self::renewed`].
    pub(crate) fn claim_renewal(&self) -> bool {
        let age = ms(self.epoch.elapsed()).saturating_sub(self.read_at_ms.load(Ordering::Relaxed));
        let every = if self.offset_ms.load(Ordering::Relaxed) == UNKNOWN {
            RETRY_UNKNOWN
        } else {
            REFRESH_AFTER
        };
        let due = age >= ms(every);
        due && !self.renewing.swap(true, Ordering::AcqRel)
    }

    /// A renewal claimed with [`Self::claim_renewal`] is over (whether or not it read the time).
    pub(crate) fn renewed(&self) {
        self.read_at_ms
            .store(ms(self.epoch.elapsed()), Ordering::Relaxed);
        self.renewing.store(false, Ordering::Release);
    }

    /// The server's time now, as estimated; `None` before the first reading.
    pub(crate) fn now_ms(&self) -> Option<u64> {
        let offset = self.offset_ms.load(Ordering::Relaxed);
        if offset == UNKNOWN {
            return None;
        }
        let now = ms(self.epoch.elapsed()).saturating_add(offset);
        u64::try_from(now).ok()
    }

    /// The deadline of a write sent now whose caller waits `timeout` for it: server ms, or 0
    /// (none) before the first reading.
    pub(crate) fn deadline(&self, timeout: Duration) -> u64 {
        let timeout = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.now_ms().map_or(0, |now| now.saturating_add(timeout))
    }
}

fn ms(span: Duration) -> i64 {
    i64::try_from(span.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before a reading there is no deadline; after one, the estimate runs on from it.
    #[test]
    fn the_estimate_follows_the_last_reading() {
        let clock = ServerClock::new();
        assert_eq!(clock.now_ms(), None);
        assert_eq!(clock.deadline(Duration::from_secs(1)), 0, "no deadline yet");
        let sent = clock.send();
        clock.read(sent, 1_000_000);
        let now = clock.now_ms().expect("an estimate");
        assert!((1_000_000..1_000_000 + 60_000).contains(&now), "{now}");
        let deadline = clock.deadline(Duration::from_secs(1));
        assert!(deadline >= now + 1_000, "{deadline} vs {now}");
        // A later reading replaces the estimate, even one that goes back (a stepped server clock).
        clock.read(clock.send(), 500);
        assert!(clock.now_ms().expect("an estimate") < 60_500);
    }
}
