//! Valkey's clock as this process estimates it, so that a write can carry a deadline that Valkey
//! itself checks.
//!
//! A `put` whose reply did not come within `valkey_timeout` has been answered with an error, but
//! its bytes may still be on the wire (a silent link that heals, a socket that drains after the
//! client reconnected) and land later, over a newer write. So every put carries a deadline on the
//! server's clock — the estimated server time when it was sent plus the timeout — and the put
//! script refuses to write once `TIME` is past it. Each put's reply (and the `TIME` read at
//! connect) is a sample: the server's time, taken as that of the round trip's midpoint, so its
//! error is at most half the round trip. As NTP's clock filter does, the estimate is the sample
//! with the shortest round trip among the recent ones ([`WINDOW`]; the latest of those within a
//! millisecond of it), carried forward on this process's monotonic clock: a put held up by the
//! server (`CLIENT PAUSE`, a slow script) is a long round trip whose midpoint says little, and it
//! moves nothing. A step of the local wall clock does not move the estimate either; a step of the
//! server's is taken with the next quick reading.
//!
//! **Cache life runs on the same clock.** `fresh_until` is compared across processes, so every
//! process reads "now" from this estimate ([`L2::now_ms`](crate::valkey::l2::L2::now_ms)), not from its
//! own wall clock: a replica whose clock runs minutes ahead or behind neither sees every copy on
//! Valkey as expired (and reloads it) nor writes copies that others find expired at once. The
//! write scripts stamp `fresh_until` on `TIME` as well, keeping the life the writer gave. The
//! wall clock ([`wall_ms`]) stands in only before the first reading, and for a table without
//! Valkey. The estimate runs on the monotonic clock, which NTP slews with the wall clock, and a
//! reading older than [`REFRESH_AFTER`] is renewed with a `TIME`.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// No estimate yet.
const UNKNOWN: i64 = i64::MIN;

/// How old a reading may grow before it is renewed (a process that only reads makes no put).
pub(crate) const REFRESH_AFTER: Duration = Duration::from_secs(30);

/// How long a sample stays a candidate for the estimate: two renewals, so that a process that only
/// reads always has its last `TIME` beside the one before.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// The most samples kept: a busy writer's are all recent, and a few dozen hold its best.
const SAMPLES: usize = 32;

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
#[cfg(feature = "fault-injection")]
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
    /// The recent samples, oldest first.
    samples: Mutex<VecDeque<Sample>>,
}

/// One reading of the server's time.
#[derive(Debug, Clone, Copy)]
struct Sample {
    round_trip: Duration,
    /// Server unix ms minus ms since the clock's epoch, at the round trip's midpoint.
    offset_ms: i64,
    /// Ms since the clock's epoch when it was read.
    at_ms: i64,
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
            samples: Mutex::new(VecDeque::with_capacity(SAMPLES)),
        }
    }

    /// Marks a round trip that will bring back the server's time.
    pub(crate) fn send(&self) -> Sent {
        Sent(Instant::now())
    }

    /// The reply to the round trip `sent` said the server's time was `server_ms`: a sample of
    /// the server's time at the round trip's midpoint. The estimate becomes the best sample of
    /// the window (the shortest round trip), which this one is only if no recent one was quicker.
    pub(crate) fn read(&self, sent: Sent, server_ms: u64) {
        let now = Instant::now();
        let round_trip = now.saturating_duration_since(sent.0);
        let mid = sent.0 + round_trip / 2;
        let sample = Sample {
            round_trip,
            offset_ms: i64::try_from(server_ms)
                .unwrap_or(i64::MAX)
                .saturating_sub(ms(mid.saturating_duration_since(self.epoch))),
            at_ms: ms(now.saturating_duration_since(self.epoch)),
        };
        let best = {
            let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
            let oldest = sample.at_ms.saturating_sub(ms(WINDOW));
            samples.retain(|s| s.at_ms >= oldest);
            if samples.len() == SAMPLES {
                samples.pop_front();
            }
            samples.push_back(sample);
            // Round trips within a millisecond of each other are as good: the latest of them
            // wins, so a quick reading after a step of the server's clock takes it at once.
            samples.iter().fold(sample, |best, s| {
                if s.round_trip.as_millis() <= best.round_trip.as_millis() {
                    *s
                } else {
                    best
                }
            })
        };
        self.offset_ms.store(best.offset_ms, Ordering::Relaxed);
        self.read_at_ms.store(sample.at_ms, Ordering::Relaxed);
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
        // A later reading as quick replaces the estimate, even one that goes back (a stepped
        // server clock).
        let quick = Sent(Instant::now());
        clock.read(quick, 500);
        assert!(clock.now_ms().expect("an estimate") < 60_500);
    }

    /// A clock whose epoch is ten seconds back, so that a round trip sent seconds ago is after it.
    fn clock_started_a_while_ago() -> ServerClock {
        let mut clock = ServerClock::new();
        clock.epoch -= Duration::from_secs(10);
        clock
    }

    /// A reading whose round trip the server held up (a put under `CLIENT PAUSE WRITE`) says the
    /// server's time at the end of the pause, not at its midpoint: it moves no estimate that a
    /// quicker recent sample made.
    #[test]
    fn a_held_up_round_trip_moves_no_estimate() {
        let clock = clock_started_a_while_ago();
        let server_now = 1_000_000_000;
        clock.read(clock.send(), server_now);
        let before = clock.now_ms().expect("an estimate");
        // Sent two seconds ago, answered now with the server's time now (it ran at the end).
        let held = Sent(Instant::now() - Duration::from_secs(2));
        clock.read(held, server_now + ms(clock.epoch.elapsed()) as u64);
        let after = clock.now_ms().expect("an estimate");
        assert!(
            after < before + 500,
            "a 2 s round trip moved the estimate ahead by {} ms",
            after - before
        );
    }

    /// Samples older than the window leave it: a slower sample is then the best there is.
    #[test]
    fn samples_leave_the_window() {
        let clock = clock_started_a_while_ago();
        let old = Sample {
            round_trip: Duration::ZERO,
            offset_ms: 0,
            at_ms: ms(clock.epoch.elapsed()) - ms(WINDOW) - 1,
        };
        clock.samples.lock().expect("samples").push_back(old);
        let slow = Sent(Instant::now() - Duration::from_millis(200));
        clock.read(slow, 5_000_000);
        let now = clock.now_ms().expect("an estimate");
        assert!(
            now > 4_000_000,
            "the sample out of the window still counted: {now}"
        );
    }
}
