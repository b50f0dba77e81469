//! The fill: what one flight does to produce an answer for every waiter of an id.
//!
//! ```text
//! GET value ── fresh ──▶ L2 hit
//!    │ missing, stale or undecodable
//!    ▼
//! acquire-or-read (SET lock token NX PX lock_ttl; GET value)
//!    ├─ value now fresh ─▶ L2 hit (a winner releases at once)
//!    ├─ won  ─▶ loader (the one source read) ─▶ fenced write ─▶ token-checked release
//!    └─ lost ─▶ loser policy: poll | serve stale | default | fail fast
//! ```
//!
//! Without a Valkey, or while it is unreachable, the fill is just the loader: one source read per
//! id per expiry in this process. The loader runs under `catch_unwind` and the table's
//! `load_timeout`, so a panicking or hanging loader fails its waiters instead of hanging them.
//! Fail-safe tables answer a failed load with a stale copy when one is at hand.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use crate::envelope::{self, Envelope, unix_ms};
use crate::error::{Error, Result};
use crate::fetched::{Fetched, Origin};
use crate::key::{Key, KeyNames, Value};
use crate::l1::{Entry, L1Cache};
use crate::l2::L2;
use crate::lock;
use crate::losers::{self, LoserPolicy, PollEnd};
use crate::stats::bump;
use crate::table::TableCore;

/// How often a serve-stale loser with no stale copy polls.
const STALE_FALLBACK_POLL: Duration = Duration::from_millis(10);

/// A flight's answer, and whether (and until when) the owner may keep it in L1.
pub(crate) struct Filled<V> {
    pub(crate) fetched: Fetched<V>,
    /// `Some` when the value is fresh and may be stored in L1.
    pub(crate) keep: Option<Entry<V>>,
}

impl<V> Filled<V> {
    fn fresh(entry: Entry<V>, origin: Origin) -> Self {
        Filled {
            fetched: Fetched::new(Arc::clone(&entry.value), origin),
            keep: Some(entry),
        }
    }

    fn answer_only(value: Arc<V>, origin: Origin, stale_by: Option<Duration>) -> Self {
        let mut fetched = Fetched::new(value, origin);
        fetched.stale_by = stale_by;
        Filled {
            fetched,
            keep: None,
        }
    }
}

/// Answers a flight's waiters before the flight ends (the soft timeout's stale copy).
pub(crate) type Early<'a, V> = &'a (dyn Fn(Fetched<V>) + Send + Sync);

/// A copy past its freshness that may still be served.
struct Stale<V> {
    value: Arc<V>,
    /// When its freshness ended.
    since: std::time::Instant,
}

impl<V> Stale<V> {
    fn from_envelope(env: Envelope<V>) -> Self {
        let now_ms = unix_ms();
        tracing::trace!(
            written_ms_ago = now_ms.saturating_sub(env.written_at_ms),
            "a stale copy on valkey"
        );
        let past = Duration::from_millis(now_ms.saturating_sub(env.fresh_until_ms));
        let now = std::time::Instant::now();
        Stale {
            value: Arc::new(env.value),
            since: now.checked_sub(past).unwrap_or(now),
        }
    }

    fn fetched(&self) -> Fetched<V> {
        let mut fetched = Fetched::new(Arc::clone(&self.value), Origin::Stale);
        fetched.stale_by = Some(self.since.elapsed());
        fetched
    }

    fn answer(&self) -> Filled<V> {
        Filled {
            fetched: self.fetched(),
            keep: None,
        }
    }
}

/// Runs one flight for `id`. `early` answers the waiters before the flight ends, when the soft
/// timeout serves a stale copy while the load goes on.
pub(crate) async fn fill<K: Key, V: Value>(
    core: &TableCore<K, V>,
    id: &K,
    early: Early<'_, V>,
) -> Result<Filled<V>> {
    let Some(l2) = &core.l2 else {
        return load_here(core, id, early).await;
    };
    let names = KeyNames::new(&core.name, id)?;
    let mut stale = match l2.get(&names).await {
        Ok(bytes) => match decode(core, bytes) {
            Some(env) if env.is_fresh(unix_ms()) => return Ok(l2_hit(core, env)),
            seen => seen.map(Stale::from_envelope),
        },
        Err(e) if is_wrong_type(&e) => {
            // Something else (a hash, a list…) sits under the value key: a miss, overwritten below.
            bump(&core.stats.counters.decode_errors);
            tracing::warn!(table = %core.name, id = ?id, "value key holds another Valkey type: treated as a miss");
            None
        }
        Err(e) => return degraded(core, id, e, early).await,
    };
    let mut deadline = None;
    loop {
        let token = lock::new_token();
        let lock_ttl_ms = core.config.lock_ttl.as_millis() as u64;
        let acquired = match lock::acquire_or_read(l2, &names, &token, lock_ttl_ms).await {
            Ok(a) => a,
            Err(e) => return degraded(core, id, e, early).await,
        };
        match decode(core, acquired.value) {
            Some(env) if env.is_fresh(unix_ms()) => {
                // Written an instant ago by the previous holder: no source read.
                if acquired.won {
                    release(core, l2, &names, &token).await;
                }
                return Ok(l2_hit(core, env));
            }
            Some(env) => stale = Some(Stale::from_envelope(env)),
            None => {}
        }
        if acquired.won {
            bump(&core.stats.counters.lock_won);
            return win(core, l2, id, &names, &token, stale, early).await;
        }
        bump(&core.stats.counters.lock_lost);
        let (every, up_to) = match on_lost(core, stale.as_ref()) {
            Lost::Answer(answer) => return answer,
            Lost::Poll { every, up_to } => (every, up_to),
        };
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + up_to);
        let polled = losers::poll(l2, &names, every, deadline, &core.stats, |bytes| {
            decode(core, bytes)
        })
        .await;
        match polled {
            Ok(PollEnd::Fresh(env)) => return Ok(l2_hit(core, env)),
            Ok(PollEnd::LockFree(seen)) => {
                // The holder died (or gave up): contend again.
                stale = seen.map(Stale::from_envelope).or(stale);
            }
            Ok(PollEnd::TimedOut) => return Err(Error::WaitTimeout { waited: up_to }),
            Err(e) => return degraded(core, id, e, early).await,
        }
    }
}

/// What the table's loser policy makes of a lost lock.
enum Lost<V> {
    /// Answer the waiters now.
    Answer(Result<Filled<V>>),
    /// Poll the value key.
    Poll { every: Duration, up_to: Duration },
}

/// Another process holds the lock: fail fast, serve the default or the stale copy, or poll.
fn on_lost<K: Key, V: Value>(core: &TableCore<K, V>, stale: Option<&Stale<V>>) -> Lost<V> {
    let counters = &core.stats.counters;
    match (&core.config.losers, stale) {
        (LoserPolicy::FailFast, _) => {
            bump(&counters.failed_fast);
            Lost::Answer(Err(Error::LockBusy))
        }
        (LoserPolicy::Default(placeholder), _) => {
            bump(&counters.defaults_served);
            let placeholder = Arc::clone(placeholder);
            Lost::Answer(Ok(Filled::answer_only(placeholder, Origin::Default, None)))
        }
        (LoserPolicy::ServeStale, Some(copy)) => {
            bump(&counters.stale_served);
            Lost::Answer(Ok(copy.answer()))
        }
        (LoserPolicy::ServeStale, None) => Lost::Poll {
            every: STALE_FALLBACK_POLL,
            up_to: core.config.lock_ttl,
        },
        (LoserPolicy::Poll { every, up_to }, _) => Lost::Poll {
            every: *every,
            up_to: *up_to,
        },
    }
}

/// This flight holds the lock: read the source, write fenced, release.
async fn win<K: Key, V: Value>(
    core: &TableCore<K, V>,
    l2: &L2,
    id: &K,
    names: &KeyNames,
    token: &str,
    stale: Option<Stale<V>>,
    early: Early<'_, V>,
) -> Result<Filled<V>> {
    let loaded = load_softly(core, id, stale.as_ref(), early).await;
    let value = match loaded {
        Ok(value) => Arc::new(value),
        Err(e) => {
            release(core, l2, names, token).await;
            return fail_safe(core, id, e, stale);
        }
    };
    let life = core.config.life();
    let now_ms = unix_ms();
    let fresh_until_ms = now_ms + life.fresh_for.as_millis() as u64;
    let encoded = envelope::encode(&*value, fresh_until_ms, now_ms, core.config.max_value_bytes);
    let bytes = match encoded {
        Ok(bytes) => bytes,
        Err(e) => {
            release(core, l2, names, token).await;
            return Err(e);
        }
    };
    let written = lock::fenced_write(l2, names, token, bytes, life.physical_ms()).await;
    let keep = match written {
        Ok(true) => true,
        Ok(false) => {
            // Our lock expired mid-rebuild (or a put/invalidate dropped it): a newer writer owns
            // the key now. Answer our waiters with what we loaded, but store it nowhere.
            bump(&core.stats.counters.fenced_write_skipped);
            tracing::debug!(table = %core.name, id = ?id, "fenced write skipped: the lock is no longer ours");
            false
        }
        Err(e) => {
            bump(&core.stats.counters.l2_errors);
            tracing::warn!(table = %core.name, id = ?id, error = %e, "fenced write failed");
            true
        }
    };
    release(core, l2, names, token).await;
    Ok(if keep {
        Filled::fresh(life.entry(value), Origin::Loaded)
    } else {
        Filled::answer_only(value, Origin::Loaded, None)
    })
}

/// The fill without Valkey (none configured, or unreachable): the loader alone.
async fn load_here<K: Key, V: Value>(
    core: &TableCore<K, V>,
    id: &K,
    early: Early<'_, V>,
) -> Result<Filled<V>> {
    let stale = l1_stale(core, id);
    match load_softly(core, id, stale.as_ref(), early).await {
        Ok(value) => {
            let entry = core.config.life().entry(Arc::new(value));
            Ok(Filled::fresh(entry, Origin::Loaded))
        }
        Err(e) => fail_safe(core, id, e, stale),
    }
}

/// L1's own copy of `id`, if it is past freshness but still within `stale_for`.
fn l1_stale<K: Key, V: Value>(core: &TableCore<K, V>, id: &K) -> Option<Stale<V>> {
    let entry = core.l1.get(id)?;
    let stale_by = entry.stale_by()?;
    let now = std::time::Instant::now();
    Some(Stale {
        value: entry.value,
        since: now.checked_sub(stale_by).unwrap_or(now),
    })
}

/// The load under the table's soft timeout: once it has run that long and a stale copy is at
/// hand, the waiters get the stale copy now and the load goes on to fill the cache.
async fn load_softly<K: Key, V: Value>(
    core: &TableCore<K, V>,
    id: &K,
    stale: Option<&Stale<V>>,
    early: Early<'_, V>,
) -> Result<V> {
    let load = load(core, id);
    let (Some(soft), Some(stale)) = (core.config.soft_timeout, stale) else {
        return load.await;
    };
    tokio::pin!(load);
    tokio::select! {
        done = &mut load => done,
        () = tokio::time::sleep(soft) => {
            bump(&core.stats.counters.soft_timeouts);
            bump(&core.stats.counters.stale_served);
            early(stale.fetched());
            load.await
        }
    }
}

/// Valkey failed mid-fill: count it and fall back to the loader in this process.
async fn degraded<K: Key, V: Value>(
    core: &TableCore<K, V>,
    id: &K,
    error: Error,
    early: Early<'_, V>,
) -> Result<Filled<V>> {
    bump(&core.stats.counters.l2_errors);
    if matches!(error, Error::ValkeyUnavailable) {
        tracing::debug!(table = %core.name, id = ?id, "valkey unavailable: loading in-process");
    } else {
        tracing::warn!(table = %core.name, id = ?id, error = %error, "valkey failed mid-fill: loading in-process");
    }
    load_here(core, id, early).await
}

/// One source read, with the table's timeout, a panic turned into an error.
async fn load<K: Key, V: Value>(core: &TableCore<K, V>, id: &K) -> Result<V> {
    bump(&core.stats.counters.source_reads);
    let started = std::panic::catch_unwind(AssertUnwindSafe(|| (core.loader)(id.clone())));
    let future = match started {
        Ok(future) => AssertUnwindSafe(future).catch_unwind(),
        Err(panic) => return Err(Error::LoaderPanicked(panic_message(&*panic))),
    };
    let finished = match core.config.load_timeout {
        Some(limit) => match tokio::time::timeout(limit, future).await {
            Ok(finished) => finished,
            Err(_) => {
                bump(&core.stats.counters.load_timeouts);
                return Err(Error::LoadTimeout(limit));
            }
        },
        None => future.await,
    };
    match finished {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Error::Source(e)),
        Err(panic) => Err(Error::LoaderPanicked(panic_message(&*panic))),
    }
}

/// A failed load: with fail-safe on and a stale copy at hand (L2's, else L1's), serve it.
fn fail_safe<K: Key, V: Value>(
    core: &TableCore<K, V>,
    id: &K,
    error: Error,
    stale: Option<Stale<V>>,
) -> Result<Filled<V>> {
    if !core.config.fail_safe {
        return Err(error);
    }
    let Some(copy) = stale.or_else(|| l1_stale(core, id)) else {
        return Err(error);
    };
    let served = copy.answer();
    bump(&core.stats.counters.fail_safe_served);
    bump(&core.stats.counters.stale_served);
    tracing::warn!(table = %core.name, id = ?id, error = %error, "load failed: served a stale copy (fail-safe)");
    Ok(served)
}

/// Decodes what Valkey held; undecodable bytes are a counted, logged miss.
fn decode<K: Key, V: Value>(core: &TableCore<K, V>, bytes: Option<Vec<u8>>) -> Option<Envelope<V>> {
    match envelope::decode(&bytes?) {
        Ok(env) => Some(env),
        Err(e) => {
            bump(&core.stats.counters.decode_errors);
            tracing::warn!(table = %core.name, error = %e, "undecodable value on valkey: treated as a miss");
            None
        }
    }
}

/// A fresh copy from Valkey; L1 keeps it until the envelope's own `fresh_until`.
fn l2_hit<K: Key, V: Value>(core: &TableCore<K, V>, env: Envelope<V>) -> Filled<V> {
    bump(&core.stats.counters.l2_hits);
    let left = Duration::from_millis(env.fresh_until_ms.saturating_sub(unix_ms()));
    let entry = Entry::new(Arc::new(env.value), left, core.config.stale_for);
    Filled::fresh(entry, Origin::L2)
}

/// The token-checked release, counted; a failure only logs (the lock expires on its own).
async fn release<K: Key, V: Value>(core: &TableCore<K, V>, l2: &L2, names: &KeyNames, token: &str) {
    match lock::release(l2, names, token).await {
        Ok(true) => bump(&core.stats.counters.released),
        Ok(false) => bump(&core.stats.counters.release_skipped),
        Err(e) => {
            bump(&core.stats.counters.l2_errors);
            tracing::warn!(table = %core.name, error = %e, "release failed; the lock will expire by its PX");
        }
    }
}

/// `WRONGTYPE`: the key holds a hash, a list… rather than a string.
fn is_wrong_type(error: &Error) -> bool {
    matches!(error, Error::Valkey { source, .. } if source.code() == Some("WRONGTYPE"))
}

fn panic_message(panic: &(dyn Any + Send)) -> Arc<str> {
    if let Some(s) = panic.downcast_ref::<&str>() {
        Arc::from(*s)
    } else if let Some(s) = panic.downcast_ref::<String>() {
        Arc::from(s.as_str())
    } else {
        Arc::from("a non-string panic payload")
    }
}
