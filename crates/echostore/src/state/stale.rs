//! What a flight answers with ([`Filled`]), how it ends ([`Landing`]), what it tells its owner
//! before it ends ([`Signal`]), and the stale copies it may serve ([`Stale`]).
//!
//! A stale copy is a value past its freshness but within the table's `stale_for`: the serve-stale
//! loser, fail-safe and the soft timeout may answer with it. The window is checked when the copy
//! is *served*, not when it was read, so a copy read early in a long flight is never served past
//! `fresh_until + stale_for`, whichever process wrote it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::Moment;
use crate::fetched::{Fetched, Origin};
use crate::state::l1::Entry;
use crate::valkey::envelope::{Envelope, Fingerprint};

/// A flight's answer, and whether (and until when) the owner may keep it in L1.
pub(crate) struct Filled<V> {
    pub(crate) fetched: Fetched<V>,
    /// `Some` when the value is fresh and may be stored in L1.
    pub(crate) keep: Option<Entry<V>>,
    /// The fingerprint of the bytes `keep` was read or written as, when known: under key
    /// tracking L1 keeps it past the unconfirmed life only once Valkey confirms those bytes.
    pub(crate) fingerprint: Option<Fingerprint>,
    /// A stale copy read from Valkey and answered: L1's stand-in for the id from now on, in
    /// place of any older copy L1 holds past its freshness (which, served later, would take the
    /// process back to before this answer).
    pub(crate) stand_in: Option<Entry<V>>,
    /// `Some`: the answer is only for the callers who joined the flight before then; those who
    /// joined since fly again (it may be older than a write made before they joined).
    pub(crate) cutoff: Option<Instant>,
}

impl<V> Filled<V> {
    /// A fresh value: answered, and kept in L1 as `entry`.
    pub(crate) fn fresh(entry: Entry<V>, origin: Origin) -> Self {
        Filled {
            fetched: Fetched::new(Arc::clone(&entry.value), origin),
            keep: Some(entry),
            fingerprint: None,
            stand_in: None,
            cutoff: None,
        }
    }

    /// The value as Valkey holds it: `fingerprint`, the bytes it was read or written as.
    pub(crate) fn made_from(mut self, fingerprint: Option<Fingerprint>) -> Self {
        self.fingerprint = fingerprint;
        self
    }

    /// The same answer, only for the callers who joined by `cutoff`.
    pub(crate) fn for_callers_before(self, cutoff: Instant) -> Self {
        Filled {
            cutoff: Some(cutoff),
            ..self
        }
    }

    /// A value answered to the waiters and stored nowhere.
    pub(crate) fn answer_only(value: Arc<V>, origin: Origin) -> Self {
        Filled {
            fetched: Fetched::new(value, origin),
            keep: None,
            fingerprint: None,
            stand_in: None,
            cutoff: None,
        }
    }
}

/// How a flight ended, as its owner takes it.
pub(crate) enum Landing<V> {
    /// An answer for the waiters (or the error below), perhaps kept in L1.
    Filled(Filled<V>),
    /// No answer its callers may take: they fly again. An early refresh that changed nothing
    /// (another process holds the regeneration lock, and its write reaches this process through
    /// coherence). (A load whose lock a write elsewhere dropped answers its row only to the
    /// callers seated before it asked for the lock, [`Filled::cutoff`]; the later ones fly
    /// again.)
    FlyAgain,
}

impl<V> Landing<V> {
    /// The same landing, its answer only for the callers seated by `cutoff`
    /// ([`Filled::for_callers_before`]).
    pub(crate) fn for_callers_before(self, cutoff: Instant) -> Self {
        match self {
            Landing::Filled(filled) => Landing::Filled(filled.for_callers_before(cutoff)),
            other => other,
        }
    }

    /// The landing with what L1 keeps of it living at most `limit`.
    pub(crate) fn capped(self, limit: Duration) -> Self {
        match self {
            Landing::Filled(filled) => Landing::Filled(Filled {
                keep: filled.keep.map(|entry| entry.capped(limit)),
                ..filled
            }),
            other => other,
        }
    }
}

/// What a running flight tells its owner.
pub(crate) enum Signal<V> {
    /// Answer the waiters now (the soft timeout's stale copy); the load goes on.
    Early(Fetched<V>),
    /// The flight (a polling loser) is about to read Valkey again: what it reads follows every
    /// push its owner has handled, so a push that detached it no longer forbids storing.
    Reading,
    /// The flight is about to write an envelope with this fingerprint: the push it causes is this
    /// process's own (coherence checks it instead of dropping L1).
    Writing(Fingerprint),
    /// The write announced with this fingerprint did not store it (fenced out, a newer value
    /// there) or failed: no push of it is to be expected.
    NotWritten(Fingerprint),
}

/// How a flight sends its signals.
pub(crate) type Signals<'a, V> = &'a (dyn Fn(Signal<V>) + Send + Sync);

/// A copy past its freshness that may still be served until `until`.
pub(crate) struct Stale<V> {
    value: Arc<V>,
    /// When its freshness ended.
    since: Moment,
    /// When it stops being servable: `since + stale_for`.
    until: Moment,
    /// The copy on Valkey this was read from (its `written_at` and fingerprint), for a reloader
    /// that may renew it there; `None` for L1's copy.
    on_valkey: Option<(u64, Option<Fingerprint>)>,
}

impl<V> Stale<V> {
    /// A stale copy read from Valkey, servable for `stale_for` past the envelope's freshness;
    /// `None` if that window has already closed.
    pub(crate) fn from_envelope(
        env: Envelope<V>,
        stale_for: Duration,
        now_ms: u64,
    ) -> Option<Self> {
        let past = Duration::from_millis(now_ms.saturating_sub(env.fresh_until_ms));
        let left = stale_for.checked_sub(past).filter(|left| !left.is_zero())?;
        let now = Moment::now();
        Some(Stale {
            on_valkey: Some((env.written_at_ms, env.read_as)),
            value: Arc::new(env.value),
            since: now.before(past),
            until: now.after(left),
        })
    }

    /// L1's copy, if it is past freshness but still servable.
    pub(crate) fn from_entry(entry: Entry<V>) -> Option<Self> {
        let (since, until) = entry.stale_window()?;
        Some(Stale {
            value: entry.value,
            since,
            until,
            on_valkey: None,
        })
    }

    /// The value, and the copy on Valkey it was read from (`written_at`, fingerprint).
    pub(crate) fn on_valkey(&self) -> Option<(&Arc<V>, u64, Option<Fingerprint>)> {
        let (written_at, fingerprint) = self.on_valkey?;
        Some((&self.value, written_at, fingerprint))
    }

    /// The answer with this copy, if it is still within its window now.
    pub(crate) fn answer(&self) -> Option<Filled<V>> {
        let now = Moment::now();
        if now >= self.until {
            return None;
        }
        let mut fetched = Fetched::new(Arc::clone(&self.value), Origin::Stale);
        fetched.stale_by = Some(now.since(self.since));
        let from_valkey = self.on_valkey.is_some();
        Some(Filled {
            fetched,
            keep: None,
            fingerprint: None,
            stand_in: from_valkey
                .then(|| Entry::stand_in(Arc::clone(&self.value), self.since, self.until)),
            cutoff: None,
        })
    }
}
