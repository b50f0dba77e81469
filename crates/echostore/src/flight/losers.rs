//! The poll loop of a loser: a flight whose policy ([`LoserPolicy`](crate::state::loser_policy::LoserPolicy)) says to wait re-reads the
//! value key until a fresh copy appears, the lock goes, or the deadline passes.
//!
//! With coherence on, a polling loser also wakes on Valkey's pushes for its value key (the winner
//! wrote) and its lock key (released, or expired with a crashed winner), so the policy's `every`
//! is only the safety interval. An error while losing is not licence to load: a failed poll is
//! retried with backoff until the deadline, and only an unreachable Valkey (the breaker open)
//! sends the flight to the in-process load.

use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::state::core::TableCore;
use crate::state::stats::{Stats, bump};
use crate::valkey::envelope::Envelope;
use crate::valkey::l2::L2;
use crate::valkey::lock;
use crate::wire::key::{Key, KeyNames, Value};

/// How often a fenced-out flight re-reads Valkey while it waits for the lock's new holder
/// ([`after_fenced_out`]; with coherence up, the holder's write wakes it at once).
pub(crate) const FENCED_OUT_POLL: Duration = Duration::from_millis(10);

/// The longest pause between retries of a failed poll.
const MAX_BACKOFF: Duration = Duration::from_millis(500);

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

/// The copy a flight whose lock a write elsewhere dropped while it loaded answers instead of its
/// row, if any: a fresh copy on Valkey for `id` now, or, with none but the lock held again, the
/// copy its new holder writes, waited for as a loser waits (every [`FENCED_OUT_POLL`] and on its push, up to the
/// table's `lock_ttl`; `reading` as for [`poll`]). That holder may have read the source before
/// this flight did, and its copy is what every later read there finds, so answering the loaded
/// row instead could make those reads go back.
pub(crate) async fn after_fenced_out<K: Key, V: Value>(
    core: &TableCore<K, V>,
    l2: &L2,
    (id, names): (&K, &KeyNames),
    reading: impl Fn(),
    decode: impl Fn(Option<Vec<u8>>) -> Option<Envelope<V>>,
) -> Option<Envelope<V>> {
    // Watched before the first read, so that the holder's push is not missed in between.
    let wake = core.watch([(id, names)]);
    let max_bytes = core.config.max_value_bytes;
    let Ok((bytes, locked)) = lock::poll(l2, names, max_bytes).await else {
        return None;
    };
    match decode(bytes) {
        Some(env) if env.is_fresh(l2.now_ms()) => return Some(env),
        _ if !locked => return None,
        _ => {}
    }
    let wait = Wait {
        l2,
        names,
        max_bytes,
        every: FENCED_OUT_POLL,
        deadline: Instant::now() + core.config.lock_ttl,
        wake: wake.as_deref(),
    };
    match poll(wait, reading, &core.stats, decode).await {
        Ok(PollEnd::Fresh(env)) => Some(env),
        Ok(PollEnd::LockFree(_) | PollEnd::TimedOut) | Err(_) => None,
    }
}
