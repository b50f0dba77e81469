//! Loser policies: what a flight does when another process holds the regeneration lock.
//!
//! | policy | behaviour | never |
//! | --- | --- | --- |
//! | `Poll { every, up_to }` | sleep `every`, re-read the value key; return it once fresh. If the lock is gone and still no fresh value (the winner died), contend again. After `up_to`: `Error::WaitTimeout`. | read the source while another holds the lock |
//! | `ServeStale` | the stale copy at once; with none, behave as `Poll` (every 10 ms, up to the table's `lock_ttl`) | block when a stale copy exists |
//! | `Default(v)` | the placeholder `v` at once; written to no cache | cache the placeholder |
//! | `FailFast` | `Error::LockBusy` at once | wait |
//!
//! Whatever the policy, every waiter of the losing flight gets the same answer. This module owns
//! the policy type and the poll loop; the fill (`fill::on_lost`) applies the policy.

use std::time::Duration;

use tokio::time::Instant;

use crate::envelope::Envelope;
use crate::error::Result;
use crate::key::{KeyNames, Value};
use crate::l2::L2;
use crate::stats::{Stats, bump};

/// What a request does when another process holds the regeneration lock for its key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoserPolicy<V> {
    /// Sleep `every`, re-read the value; return it once fresh. If the lock vanishes with no
    /// fresh value (its holder died), contend again. After `up_to`, `Error::WaitTimeout`.
    Poll {
        /// Pause between reads.
        every: Duration,
        /// Give up after this long.
        up_to: Duration,
    },
    /// Return the stale copy at once; with none, poll every 10 ms up to the table's `lock_ttl`.
    ServeStale,
    /// Return this placeholder at once. It is written to no cache.
    Default(V),
    /// Fail at once with `Error::LockBusy`.
    FailFast,
}

impl<V> LoserPolicy<V> {
    /// The default policy: poll every 10 ms for up to 5 s.
    pub const DEFAULT_POLL: LoserPolicy<V> = LoserPolicy::Poll {
        every: Duration::from_millis(10),
        up_to: Duration::from_secs(5),
    };
}

/// How a poll ended.
pub(crate) enum PollEnd<V> {
    /// A fresh value appeared.
    Fresh(Envelope<V>),
    /// The lock is gone and no fresh value was written: the holder died or gave up. Contend again.
    LockFree(Option<Envelope<V>>),
    /// `up_to` ran out.
    TimedOut,
}

/// Polls the value key until it is fresh, the lock vanishes, or `deadline` passes.
pub(crate) async fn poll<V: Value>(
    l2: &L2,
    names: &KeyNames,
    every: Duration,
    deadline: Instant,
    stats: &Stats,
    decode: impl Fn(Option<Vec<u8>>) -> Option<Envelope<V>>,
) -> Result<PollEnd<V>> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(PollEnd::TimedOut);
        }
        tokio::time::sleep(every.min(deadline - now)).await;
        bump(&stats.counters.poll_waits);
        let (bytes, locked) = l2.poll(names).await?;
        let seen = decode(bytes);
        match seen {
            Some(env) if env.is_fresh(crate::envelope::unix_ms()) => {
                return Ok(PollEnd::Fresh(env));
            }
            seen if !locked => return Ok(PollEnd::LockFree(seen)),
            _ => {}
        }
    }
}
