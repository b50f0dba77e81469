//! Loser policies: what a flight does when another process holds the regeneration lock — the
//! policy type, the decision it makes, and the poll loop.
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

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::fetched::Origin;
use crate::key::KeyNames;
use crate::l2::L2;
use crate::lock;
use crate::stale::{Filled, Stale};
use crate::stats::{Stats, bump};

/// How often a serve-stale loser with no stale copy polls.
const STALE_FALLBACK_POLL: Duration = Duration::from_millis(10);

/// The longest pause between retries of a failed poll.
const MAX_BACKOFF: Duration = Duration::from_millis(500);

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

/// How a poll ended.
pub(crate) enum PollEnd<V> {
    /// A fresh value appeared.
    Fresh(Envelope<V>),
    /// The lock is gone and no fresh value was written: the holder died, gave up, or another
    /// process invalidated the id. Contend again, with what the value key holds now.
    LockFree(Option<Envelope<V>>),
    /// The deadline passed.
    TimedOut,
}

/// What a losing flight waits on: an id's keys (their value read up to `max_bytes`), polled every
/// `every` until `deadline`, and the wake-up coherence gives it (`None`: tracking is down).
pub(crate) struct Wait<'a> {
    pub(crate) l2: &'a L2,
    pub(crate) names: &'a KeyNames,
    pub(crate) max_bytes: usize,
    pub(crate) every: Duration,
    pub(crate) deadline: Instant,
    pub(crate) wake: Option<&'a Notify>,
}

/// Polls a value key and its lock until the value is fresh, the lock vanishes, or `deadline`
/// passes. With a `wake` (coherence up), a push for the value or lock key re-reads at once and
/// `every` is only the safety interval. A failed poll is counted and retried with backoff; only
/// [`Error::ValkeyUnavailable`] (the breaker open) ends the poll with an error.
pub(crate) async fn poll<V>(
    wait: Wait<'_>,
    reading: impl Fn(),
    stats: &Stats,
    decode: impl Fn(Option<Vec<u8>>) -> Option<Envelope<V>>,
) -> Result<PollEnd<V>> {
    let Wait {
        l2,
        names,
        max_bytes,
        every,
        deadline,
        wake,
    } = wait;
    let mut pause = every;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(PollEnd::TimedOut);
        }
        let wait = tokio::time::sleep(pause.min(deadline - now));
        let pushed = match wake {
            Some(wake) => {
                let pushed = tokio::select! {
                    () = wake.notified() => true,
                    () = wait => false,
                };
                // The owner learns it before the read goes out: a push it handled before this
                // came before the read, so the read may be kept.
                reading();
                pushed
            }
            None => {
                wait.await;
                false
            }
        };
        bump(if pushed {
            &stats.counters.push_wakeups
        } else {
            &stats.counters.poll_waits
        });
        match lock::poll(l2, names, max_bytes).await {
            Ok((bytes, locked)) => {
                pause = every;
                match decode(bytes) {
                    Some(env) if env.is_fresh(l2.now_ms()) => return Ok(PollEnd::Fresh(env)),
                    seen if !locked => return Ok(PollEnd::LockFree(seen)),
                    _ => {}
                }
            }
            Err(Error::ValkeyUnavailable) => return Err(Error::ValkeyUnavailable),
            Err(e) => {
                bump(&stats.counters.l2_errors);
                tracing::debug!(error = %e, "a poll failed; retrying with backoff");
                pause = (pause * 2).min(MAX_BACKOFF.max(every));
            }
        }
    }
}
