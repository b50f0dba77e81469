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

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// No estimate yet.
const UNKNOWN: i64 = i64::MIN;

/// The offset from this process's monotonic clock to Valkey's `TIME`, in ms.
pub(crate) struct ServerClock {
    epoch: Instant,
    /// Server unix ms minus ms since `epoch`; [`UNKNOWN`] before the first reading.
    offset_ms: AtomicI64,
}

/// When a round trip was sent, for [`ServerClock::read`] once its reply came.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent(Instant);

impl ServerClock {
    pub(crate) fn new() -> Self {
        ServerClock {
            epoch: Instant::now(),
            offset_ms: AtomicI64::new(UNKNOWN),
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
