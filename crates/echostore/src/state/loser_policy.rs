//! Loser policies: what a flight does when another process holds the regeneration lock — the
//! policy type ([`LoserPolicy`]) and the decision it makes ([`Lost`]); the poll loop a waiting
//! loser runs is `crate::flight::losers`. It sits with the table's settings, below the flights
//! that act on it.
//!
//! | policy | behaviour | never |
//! | --- | --- | --- |
//! | `Poll { every, up_to }` | sleep `every`, re-read the value key; return it once fresh. If the lock is gone and still no fresh value (the winner died), contend again. After `up_to`: `Error::WaitTimeout`. | read the source while another holds the lock |
//! | `ServeStale` | the stale copy at once (while within `stale_for`); with none, behave as `Poll` (every 10 ms, up to the table's `lock_ttl`) | block when a servable stale copy exists |
//! | `Default(v)` | the placeholder `v` at once; written to no cache | cache the placeholder |
//! | `FailFast` | `Error::LockBusy` at once | wait |
//!
//! With coherence on, a polling loser also wakes on Valkey's pushes for its value key (the winner
//! wrote) and its lock key (released, or expired with a crashed winner), so `every` is only the
//! safety interval. Whatever the policy, every waiter of the losing flight gets the same answer. An error while
//! losing is not licence to load: a failed poll is retried with backoff until the deadline, and
//! only an unreachable Valkey (the breaker open) sends the flight to the in-process load.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fetched::Origin;
use crate::state::stale::{Filled, Stale};
use crate::state::stats::{Stats, bump};

/// How often a serve-stale loser with no stale copy polls.
const STALE_FALLBACK_POLL: Duration = Duration::from_millis(10);

/// What a request does when another process holds the regeneration lock for its key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoserPolicy<V> {
    /// Wait, re-read the value; return it once fresh. With coherence on, a push for the value
    /// or the lock key (the winner wrote, or its lock went) wakes the loser at once and `every`
    /// is only the safety interval; without it, the loser re-reads every `every`. If the lock
    /// vanishes with no fresh value (its holder died), contend again. After `up_to`,
    /// `Error::WaitTimeout`.
    Poll {
        /// Pause between reads (the safety interval when coherence wakes the loser).
        every: Duration,
        /// Give up after this long.
        up_to: Duration,
    },
    /// Return the stale copy at once (while it is within the table's `stale_for`); with none,
    /// poll every 10 ms up to the table's `lock_ttl`.
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

    /// The policy as flights hold it: a placeholder shared by every answer.
    pub(crate) fn shared(self) -> LoserPolicy<Arc<V>> {
        match self {
            LoserPolicy::Poll { every, up_to } => LoserPolicy::Poll { every, up_to },
            LoserPolicy::ServeStale => LoserPolicy::ServeStale,
            LoserPolicy::Default(v) => LoserPolicy::Default(Arc::new(v)),
            LoserPolicy::FailFast => LoserPolicy::FailFast,
        }
    }
}

/// What the table's loser policy makes of a lost lock.
pub(crate) enum Lost<V> {
    /// Answer the waiters now.
    Answer(Result<Filled<V>>),
    /// Poll the value key.
    Poll { every: Duration, up_to: Duration },
}

impl<V> LoserPolicy<Arc<V>> {
    /// Another process holds the lock: fail fast, serve the default or the stale copy, or poll.
    pub(crate) fn on_lost(
        &self,
        stats: &Stats,
        stale: Option<&Stale<V>>,
        lock_ttl: Duration,
    ) -> Lost<V> {
        let counters = &stats.counters;
        match self {
            LoserPolicy::FailFast => {
                bump(&counters.failed_fast);
                Lost::Answer(Err(Error::LockBusy))
            }
            LoserPolicy::Default(placeholder) => {
                bump(&counters.defaults_served);
                let placeholder = Arc::clone(placeholder);
                Lost::Answer(Ok(Filled::answer_only(placeholder, Origin::Default)))
            }
            LoserPolicy::ServeStale => match stale.and_then(Stale::answer) {
                Some(answer) => {
                    bump(&counters.stale_served);
                    Lost::Answer(Ok(answer))
                }
                None => Lost::Poll {
                    every: STALE_FALLBACK_POLL,
                    up_to: lock_ttl,
                },
            },
            LoserPolicy::Poll { every, up_to } => Lost::Poll {
                every: *every,
                up_to: *up_to,
            },
        }
    }
}
