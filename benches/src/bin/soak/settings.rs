//! The soak's fixed settings: the library's timeouts and the fault odds. The command line
//! ([`crate::args`]) sets the load; these set the library, the faults and the check's tolerances.

use std::time::Duration;

/// The one table name every store opens, so that the stores share its keys and locks on Valkey.
pub(crate) const TABLE: &str = "soak";
/// Stale copies stay on Valkey this long past their ttl (the serve-stale store uses them).
pub(crate) const STALE_FOR: Duration = Duration::from_secs(1);
/// `PX` of the regeneration lock. Shorter than [`LOAD_TIMEOUT`] on purpose: were it longer, every
/// load slow enough to outlive its lock would be cut off first, and no lock could ever expire
/// mid-rebuild.
pub(crate) const LOCK_TTL: Duration = Duration::from_millis(600);
/// Loads running longer are cut off: their waiters get `LoadTimeout`, the lock is released.
pub(crate) const LOAD_TIMEOUT: Duration = Duration::from_millis(1500);
/// The polling losers' pace and patience.
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(5);
pub(crate) const POLL_UP_TO: Duration = Duration::from_secs(3);
/// Valkey calls and the circuit breaker: short, so that an outage is noticed and left quickly.
pub(crate) const VALKEY_TIMEOUT: Duration = Duration::from_millis(500);
pub(crate) const BREAKER_COOLDOWN: Duration = Duration::from_millis(100);
/// A get that has not answered after this long is a hung waiter. Every wait inside the library is
/// bounded far below it (poll 3 s, load 1.5 s, Valkey calls 0.5 s each).
pub(crate) const GET_DEADLINE: Duration = Duration::from_secs(10);
/// After the workers stop: how long the last flights have to land.
pub(crate) const SETTLE: Duration = Duration::from_secs(10);
/// How often each store's breaker and Valkey error counter are sampled.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(2);
/// Share of gets that go to the hot tenth of the keys.
pub(crate) const HOT_SHARE: f64 = 0.8;
/// What the `Default` loser policy answers; it is no key's value.
pub(crate) const PLACEHOLDER: Payload = (u64::MAX, 0, 0);

/// A value: (key, version, store that loaded it). The version counts source reads, so that two
/// answers can be told apart; the key lets every answer be checked against the key asked.
pub(crate) type Payload = (u64, u64, u64);

/// Fault odds per source read.
pub(crate) const P_ERROR: f64 = 0.02;
pub(crate) const P_PANIC: f64 = 0.005;
pub(crate) const P_SLOW: f64 = 0.02;
/// Of the slow reads: the share that outlives the lock (but not the load timeout), and the share
/// that outlives the load timeout. The rest stay well inside the lock.
pub(crate) const SLOW_PAST_LOCK: f64 = 0.2;
pub(crate) const SLOW_PAST_TIMEOUT: f64 = 0.05;

/// The check's tolerances (see docs/soak.md). A value loaded at `end` is fresh on Valkey until
/// `end + ttl` minus at most 1 ms (whole unix milliseconds): pairs closer than `ttl - EXPIRY_SLACK`
/// are close.
pub(crate) const EXPIRY_SLACK: Duration = Duration::from_millis(5);
/// The lock is taken a little before the loader starts: a takeover may start this much before
/// `start + LOCK_TTL` of the read it took over from.
pub(crate) const LOCK_SLACK: Duration = Duration::from_millis(50);
/// Each window in which a store could not use Valkey is widened by this much on both sides: a
/// degraded read starts an instant after the failed call that made it degraded.
pub(crate) const WINDOW_MARGIN: Duration = Duration::from_millis(50);
