//! The fill: what one flight does to produce an answer for every waiter of an id, read top to
//! bottom as the protocol.
//!
//! ```text
//! GETRANGE value ── fresh ──▶ L2 hit        (skipped when the caller just made this read)
//!    │ missing, stale, oversized or undecodable
//!    ▼
//! acquire-or-read (SET lock token NX PX lock_ttl; GETRANGE value)
//!    ├─ value now fresh ─▶ L2 hit (a winner releases at once)
//!    ├─ won  ─▶ loader under the lease (the one source read) ─▶ fenced write and release
//!    └─ lost ─▶ loser policy: poll | serve stale | default | fail fast
//! ```
//!
//! The fenced write deletes the lock in the same script when it writes (or finds a newer value):
//! a winner's landing is one round trip, and losers see the value and the lock gone together. A
//! winner that writes nothing (the load failed, or could not be encoded) releases on its own.
//!
//! An **early refresh** (XFetch, `docs/early-refresh.md`) is the same protocol for an id whose L1
//! value is still fresh, with three differences: a value on Valkey counts as fresh only if it is
//! *newer* than the one being refreshed (the same value is what needs rebuilding); losing the lock
//! ends it with nothing done ([`Landing::FlyAgain`]: the winner's write reaches this process through
//! coherence); and it serves no stale copy and no fail-safe (a failed refresh leaves the current
//! value in L1 until its freshness ends).
//!
//! Without a Valkey, when it is unreachable (the breaker open), or when it refuses the acquire
//! itself (an error reply: then no lock exists to wait for), the fill is just the loader: one
//! source read per id per expiry in this process. Once this flight has *lost* the lock, an error
//! is not licence to read the source: the poll retries with backoff until the loser's deadline,
//! and only an open breaker sends the flight to the in-process load.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::Moment;
use crate::error::{Error, Result};
use crate::fetched::Origin;
use crate::flight::load::Load;
use crate::flight::losers::{self, PollEnd, Wait};
use crate::state::core::{TableCore, millis};
use crate::state::l1::Entry;
use crate::state::loser_policy::{LoserPolicy, Lost};
use crate::state::stale::{Filled, Landing, Signal, Signals, Stale};
use crate::state::stats::bump;
use crate::valkey::envelope::{self, Envelope, Fingerprint};
use crate::valkey::l2::L2;
use crate::valkey::lock::{self, Fenced, HeldLock, Renewed};
use crate::wire::key::{Key, KeyNames, Value};

mod copies;
mod lease;
mod reloader_call;

use reloader_call::Reloaded;

pub(crate) use copies::decode_counted;

/// One flight of one id: the table, the id, and how it signals its owner.
pub(crate) struct Fill<'a, K, V> {
    core: &'a TableCore<K, V>,
    id: &'a K,
    signals: Signals<'a, V>,
    load: Load<'a, K, V>,
    /// The last bytes that did not decode: the same bytes read again are not parsed (or counted)
    /// twice.
    refused: Mutex<Option<Fingerprint>>,
    /// An early refresh of the L1 value fresh until then; `None` for a fill.
    refreshing: Option<Moment>,
    /// The caller that started the flight has just read the value key and found no fresh copy.
    after_read: bool,
}

/// The id's keys on the store's Valkey.
struct OnValkey<'a> {
    l2: &'a L2,
    names: KeyNames,
}

/// How a lost contention ended: with the flight's landing, or with the lock gone and the copy
/// the key holds now, to contend again.
enum Losing<V> {
    Done(Result<Landing<V>>),
    Again(Option<Stale<V>>),
}

impl<'a, K: Key, V: Value> Fill<'a, K, V> {
    pub(crate) fn new(core: &'a TableCore<K, V>, id: &'a K, signals: Signals<'a, V>) -> Self {
        Fill {
            core,
            id,
            signals,
            load: Load::new(core, id, signals),
            refused: Mutex::new(None),
            refreshing: None,
            after_read: false,
        }
    }

    /// The flight of a caller that has just read Valkey and found no fresh copy (`read`): its
    /// first round trip is the lock attempt, which reads the value again in the same script.
    pub(crate) fn after_read(self, read: bool) -> Self {
        Fill {
            after_read: read,
            ..self
        }
    }

    /// The flight with the loser policy `losers` instead of the table's (when given).
    pub(crate) fn losing_by(self, losers: Option<LoserPolicy<Arc<V>>>) -> Self {
        Fill {
            load: self.load.losing_by(losers),
            ..self
        }
    }

    /// The flight as an early refresh of the L1 value fresh until `until`.
    pub(crate) fn refreshing(self, until: Moment) -> Self {
        Fill {
            refreshing: Some(until),
            ..self
        }
    }

    /// Runs the flight to its end.
    pub(crate) async fn run(self) -> Result<Landing<V>> {
        let Some(l2) = &self.core.l2 else {
            return self.here().await;
        };
        let at = OnValkey {
            l2,
            names: self.core.names(self.id)?,
        };
        // Valkey's copy of an id whose write failed here may be older than the source.
        if let Err(e) = self.core.unsettled.repair(self.id, l2).await {
            return self.degraded(&at, e).await;
        }
        self.core.hear_marks().await;
        if self.after_read {
            return self.contend(&at, None).await;
        }
        let max = self.core.config.max_value_bytes;
        let read = crate::state::metrics::time_l2(&self.core.name, l2.get(&at.names, max));
        let stale = match read.await {
            Ok(bytes) => match self.decode(bytes) {
                Some(env) if self.takes(&env) => return Ok(Landing::Filled(self.l2_hit(env))),
                seen => seen.and_then(|env| self.stale(env)),
            },
            Err(e) if e.is_wrong_type() => {
                // Something else (a hash, a list…) sits under the value key: a miss, overwritten below.
                bump(&self.core.stats.counters.decode_errors);
                tracing::warn!(table = %self.core.name, id = ?self.id, "value key holds another Valkey type: treated as a miss");
                None
            }
            Err(e) => return self.degraded(&at, e).await,
        };
        self.contend(&at, stale).await
    }

    /// The fill without a Valkey (none, or unreachable): the loader in this process.
    async fn here(&self) -> Result<Landing<V>> {
        if self.core.l2.is_none() {
            crate::spans::record("echostore.lock", "none");
        }
        let filled = match self.refreshing {
            Some(_) => self.load.refresh_here().await,
            None => self.load.here().await,
        };
        filled.map(Landing::Filled)
    }

    /// Contends for the lock until this flight wins it, a fresh value appears, the loser policy
    /// answers, or the deadline passes.
    async fn contend(&self, at: &OnValkey<'_>, mut stale: Option<Stale<V>>) -> Result<Landing<V>> {
        let config = &self.core.config;
        let (lock_ttl_ms, max) = (millis(config.lock_ttl), config.max_value_bytes);
        let mut deadline = None;
        // Watch the id's keys before the first acquire, so that no push in between is missed.
        let wake = self.core.watch([(self.id, &at.names)]);
        loop {
            // Taken before the lock attempt: a load this attempt wins reads the source after it.
            let stamp = self.core.marks.stamp();
            // An acquire that fails (Valkey away, or refusing writes) leaves no lock to wait for:
            // load in-process, as without Valkey.
            let acquired = match lock::acquire_or_read(at.l2, &at.names, lock_ttl_ms, max).await {
                Ok(acquired) => acquired,
                Err(e) => return self.degraded(at, e).await,
            };
            match self.decode(acquired.value) {
                Some(env) if self.takes(&env) => {
                    // Written an instant ago by the previous holder: no source read.
                    if let Some(held) = &acquired.held {
                        self.release(held).await;
                    }
                    return Ok(Landing::Filled(self.l2_hit(env)));
                }
                Some(env) => {
                    if acquired.held.is_some() {
                        tracing::debug!(table = %self.core.name, id = ?self.id, fresh_until_ms = env.fresh_until_ms, now_ms = self.core.now_ms(), "lock won over a copy not taken: loading");
                    }
                    stale = self.stale(env).or(stale);
                }
                None => {}
            }
            if let Some(held) = &acquired.held {
                crate::spans::record("echostore.lock", "won");
                bump(&self.core.stats.counters.lock_won);
                match self.win(at, held, stamp, stale).await {
                    Won::Done(landing) => return landing,
                    Won::LostWhileQueued(seen) => {
                        stale = seen;
                        continue;
                    }
                }
            }
            bump(&self.core.stats.counters.lock_lost);
            crate::spans::record("echostore.lock", "lost");
            if self.refreshing.is_some() {
                // Another process is rebuilding the id: its write will reach us.
                return Ok(Landing::FlyAgain);
            }
            match self.lose(at, stale, &mut deadline, wake.as_deref()).await {
                Losing::Done(landing) => return landing,
                Losing::Again(seen) => stale = seen,
            }
        }
    }

    /// Another process holds the lock: the loser policy answers, or this flight polls until a
    /// fresh value appears, the lock goes (contend again with what the key holds then: never an
    /// older copy that was since removed), or `deadline` (set by the first loss) passes.
    async fn lose(
        &self,
        at: &OnValkey<'_>,
        stale: Option<Stale<V>>,
        deadline: &mut Option<Instant>,
        wake: Option<&tokio::sync::Notify>,
    ) -> Losing<V> {
        let config = &self.core.config;
        let policy = self.load.policy();
        let (every, up_to) = match policy.on_lost(&self.core.stats, stale.as_ref(), config.lock_ttl)
        {
            Lost::Answer(answer) => return Losing::Done(answer.map(Landing::Filled)),
            Lost::Poll { every, up_to } => (every, up_to),
        };
        let wait = Wait {
            l2: at.l2,
            names: &at.names,
            max_bytes: config.max_value_bytes,
            every,
            deadline: *deadline.get_or_insert_with(|| Instant::now() + up_to),
            wake,
        };
        let reading = || (self.signals)(Signal::Reading);
        let polled = losers::poll(wait, reading, &self.core.stats, |b| self.decode(b)).await;
        Losing::Done(match polled {
            Ok(PollEnd::Fresh(env)) => Ok(Landing::Filled(self.l2_hit(env))),
            Ok(PollEnd::LockFree(seen)) => return Losing::Again(seen.and_then(|e| self.stale(e))),
            Ok(PollEnd::TimedOut) => Err(Error::WaitTimeout { waited: up_to }),
            Err(e) => self.degraded(at, e).await,
        })
    }

    /// This flight holds the lock: read the source under the lease (or ask the reloader about
    /// the stale copy), write fenced (stamped with the generation `stamp`) and release in one
    /// script.
    async fn win(
        &self,
        at: &OnValkey<'_>,
        held: &HeldLock<'_>,
        stamp: u64,
        stale: Option<Stale<V>>,
    ) -> Won<V> {
        let stale = match self.reload(held, stale).await {
            Reloaded::NotAsked(stale) => stale,
            Reloaded::Store(value, delta) => {
                return Won::Done(self.store(at, held, stamp, (value, delta)).await);
            }
            Reloaded::FencedOut(value) => {
                return Won::Done(Ok(self.fenced_out(at, held, value).await));
            }
            Reloaded::Done(answer) => return Won::Done(answer.map(Landing::Filled)),
        };
        let still_ours = || async { self.extend(held).await };
        let leased = self
            .load
            .leased(self.lease(held), stale.as_ref(), still_ours);
        Won::Done(match leased.await {
            Ok(Some((value, delta))) => self.store(at, held, stamp, (Arc::new(value), delta)).await,
            Ok(None) => return Won::LostWhileQueued(stale),
            Err(e) if e.is_absent() => match self.delete_gone(held).await {
                true => Err(e),
                false => Ok(self.gone_fenced_out(at).await),
            },
            Err(e) => {
                // Serve a stale copy only if the lock was still ours: then no put or invalidate
                // (which drop the lock) and no other winner replaced the copy in the meantime.
                let ours = self.release(held).await != Some(false);
                if self.refreshing.is_some() {
                    return Won::Done(Err(e)); // the current value stays in L1 until its freshness ends
                }
                let served = self.load.fail_safe(e, stale.filter(|_| ours), ours);
                served.map(Landing::Filled)
            }
        })
    }

    /// The winner's loaded value (and how long the load took), written fenced and released.
    async fn store(
        &self,
        at: &OnValkey<'_>,
        held: &HeldLock<'_>,
        stamp: u64,
        (value, delta): (Arc<V>, Duration),
    ) -> Result<Landing<V>> {
        let life = self.core.loaded_life(&value, delta);
        let encoded = self
            .core
            .marking(self.id, &value, stamp.max(self.load.read_at()))
            .and_then(|marking| life.encode(&*value, &self.core.config, &marking));
        let bytes = match encoded {
            Ok(bytes) => bytes,
            Err(e) => {
                self.release(held).await;
                return Err(e);
            }
        };
        let fingerprint = envelope::fingerprint(&bytes);
        (self.signals)(Signal::Writing(fingerprint));
        let wrote = self.write_fenced(held, bytes, life.physical_ms()).await;
        if !matches!(wrote, Wrote::Kept) {
            (self.signals)(Signal::NotWritten(fingerprint));
        }
        Ok(match wrote {
            Wrote::Kept => Landing::Filled(
                Filled::fresh(life.entry(value), Origin::Loaded).made_from(Some(fingerprint)),
            ),
            Wrote::Refused => Landing::Filled(Filled::answer_only(value, Origin::Loaded)),
            Wrote::FencedOut => self.fenced_out(at, held, value).await,
            Wrote::Unknown => self.unknown_fate(held, life.entry(value)),
        })
    }

    /// The winner's write of `bytes`, fenced by its lock, which it releases in the same script
    /// (counted as a release would be); what became of it.
    async fn write_fenced(&self, held: &HeldLock<'_>, bytes: Vec<u8>, px: u64) -> Wrote {
        let counters = &self.core.stats.counters;
        let others = self.core.other_copies(self.id);
        match held.write(bytes, px, &others).await {
            Ok(Fenced::Written) => {
                bump(&counters.released);
                Wrote::Kept
            }
            Ok(Fenced::NotOurs) => {
                // A put/invalidate dropped our lock, or it expired while Valkey was away and was
                // taken over: a newer writer owns the key.
                bump(&counters.fenced_write_skipped);
                bump(&counters.release_skipped);
                tracing::debug!(table = %self.core.name, id = ?self.id, "fenced write skipped: the lock is no longer ours");
                Wrote::FencedOut
            }
            Ok(Fenced::Superseded) => {
                bump(&counters.writes_superseded);
                bump(&counters.released);
                tracing::debug!(table = %self.core.name, id = ?self.id, "fenced write superseded: a newer copy is stored");
                Wrote::Refused
            }
            Err(e) => {
                bump(&counters.l2_errors);
                tracing::warn!(table = %self.core.name, id = ?self.id, error = %e, "fenced write failed");
                // Whether it ran is unknown: the lock may still be ours.
                self.release(held).await;
                Wrote::Unknown
            }
        }
    }

    /// A write elsewhere dropped this flight's lock while it loaded. What Valkey holds now is
    /// what every later read there finds until the next write lands, so a fresh copy there
    /// answers the waiters, even a put's older row: answering the loaded row, newer, would make
    /// those later reads go back. So does the copy of a flight that took the lock over since
    /// ([`losers::after_fenced_out`]). Otherwise the loaded row answers the callers who joined
    /// before this hold's acquire was sent, and only them: the write that dropped the hold began
    /// after that, so the row is no older than anything they must see, while a caller that joined
    /// later may have joined after that write returned — a write this process may never hear of
    /// (an invalidation of a copy it does not hold, another schema's write) — and must not take
    /// an older row. Those callers fly again, to a flight of their own, which answers at least its
    /// own first callers; the row is kept nowhere.
    async fn fenced_out(
        &self,
        at: &OnValkey<'_>,
        held: &HeldLock<'_>,
        value: Arc<V>,
    ) -> Landing<V> {
        let reading = || (self.signals)(Signal::Reading);
        let decode = |bytes| self.decode(bytes);
        let id = (self.id, &at.names);
        match losers::after_fenced_out(self.core, at.l2, id, reading, decode).await {
            Some(env) if self.takes(&env) => Landing::Filled(self.l2_hit(env)),
            _ => Landing::Filled(
                Filled::answer_only(value, Origin::Loaded).for_callers_before(held.sent_at()),
            ),
        }
    }

    /// The row was found gone, but a write elsewhere dropped the lock meanwhile, and its value
    /// stands: the callers take what it left, as a fenced-out load's do, or, with nothing there,
    /// fly again. A caller who joined after that write must not take the gone row: unless a push
    /// of the write overtook this flight first (none comes under key tracking for a key this
    /// process has not read, nor with coherence off), it is still joinable.
    async fn gone_fenced_out(&self, at: &OnValkey<'_>) -> Landing<V> {
        let reading = || (self.signals)(Signal::Reading);
        let decode = |bytes| self.decode(bytes);
        let id = (self.id, &at.names);
        match losers::after_fenced_out(self.core, at.l2, id, reading, decode).await {
            Some(env) if self.takes(&env) => Landing::Filled(self.l2_hit(env)),
            _ => Landing::FlyAgain,
        }
    }

    /// The fenced write failed, and whether it ran is unknown: it may have written the row, been
    /// fenced out by a write this process never hears of, or never run, leaving Valkey an older
    /// copy than the row answered here. So the row is kept as a degraded load's is: for the
    /// unconfirmed life only (no push may retire it), in place of L1's older copy (an early
    /// refresh's, which Valkey's row, if written, has passed); and the id is marked unsettled:
    /// Valkey's copy is deleted before this process trusts it again, else a later read here
    /// could go back to it (its stale copy served).
    fn unknown_fate(&self, held: &HeldLock<'_>, entry: Entry<V>) -> Landing<V> {
        self.unsettle(held, Some(&entry.value));
        Landing::Filled(Filled::fresh(entry, Origin::Loaded)).capped(self.core.unconfirmed_l1_life)
    }

    /// Marks the id unsettled after a write back of its load whose outcome is unknown: Valkey's
    /// copy of the value goes before this process trusts Valkey for the id again, unless it
    /// shows the loaded row's version (`None`: the row was gone).
    fn unsettle(&self, held: &HeldLock<'_>, row: Option<&V>) {
        let (names, l2) = held.on();
        let repair = self.core.load_repair(row);
        self.core
            .unsettled
            .mark(self.id.clone(), names.clone(), repair, l2);
    }

    /// Valkey is unreachable or refused the acquire: count it and fall back to the loader in this
    /// process. What it loads is never written to Valkey, so L1 keeps it only for the unconfirmed
    /// life (no push will retire it when another process writes the id), and the id is marked
    /// unsettled ([`crate::state::unsettled`]): Valkey's copy may be older than what this process now
    /// answers (a writer's put failed, the source moved on), so it is deleted as soon as Valkey
    /// takes it, before this process trusts Valkey for the id again — else its next read there
    /// would go back — and every other process hears the delete.
    async fn degraded(&self, at: &OnValkey<'_>, error: Error) -> Result<Landing<V>> {
        bump(&self.core.stats.counters.l2_errors);
        crate::spans::record("echostore.lock", "unreachable");
        tracing::debug!(table = %self.core.name, id = ?self.id, error = %error, "valkey unreachable: loading in-process");
        let life = self.core.unconfirmed_l1_life;
        let landing = self.here().await;
        // A row loaded here, or found gone: Valkey's copy may be older than either.
        let read = match &landing {
            Ok(Landing::Filled(f)) if f.fetched.origin == Origin::Loaded => {
                Some(Some(&*f.fetched.value))
            }
            Err(e) if e.is_absent() => Some(None),
            _ => None,
        };
        if let Some(row) = read {
            let repair = self.core.load_repair(row);
            self.core
                .unsettled
                .mark(self.id.clone(), at.names.clone(), repair, at.l2);
        }
        Ok(landing?.capped(life))
    }
}

/// What a won lock came to.
enum Won<V> {
    /// The flight's answer (or its error).
    Done(Result<Landing<V>>),
    /// The lock was lost while the read waited for the table's budget, before any source read:
    /// the flight contends again, with its stale copy, and finds what the id's change left.
    LostWhileQueued(Option<Stale<V>>),
}

/// What became of a winner's fenced write.
enum Wrote {
    /// Written: L1 may keep the value.
    Kept,
    /// Valkey failed to answer: written or not, unknown ([`Fill::unknown_fate`]).
    Unknown,
    /// A newer value is stored: the loaded one answers, kept nowhere.
    Refused,
    /// The lock was no longer this flight's ([`Fill::fenced_out`]).
    FencedOut,
}
