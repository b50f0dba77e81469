//! An L1 entry: one cached value with its life, packed into four words for the hit path — its
//! freshness deadline (read on the coarse clock until the early-refresh window opens), its stale
//! window, and XFetch's early refresh (`delta·beta`); [`Freshness`] is what a read finds in it.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Deadline, Moment};

/// How far before expiry the early-refresh window opens, in units of `delta·beta`: 4, where
/// XFetch's chance to refresh at one read is `e^-4` ≈ 1.8 %. Before the window a hit reads no
/// precise clock and draws nothing; a hot key is therefore rebuilt no sooner than `4·delta·beta`
/// before its expiry, which bounds what early refresh costs in source reads (the trade is in
/// `docs/early-refresh.md`).
pub(crate) const EARLY_WINDOW_K: u32 = 4;

/// One cached value and its life.
///
/// The stale window and `delta·beta` are kept in 32 bits each, so that an entry stays at four
/// words: `stale_ms` saturates at `u32::MAX` ms (about 49.7 days: an L1 copy is never servable as
/// stale longer past its freshness, whatever `stale_for`; Valkey's copy keeps the full window),
/// and `early_us` at `u32::MAX` µs (about 71.6 minutes of `delta·beta`).
pub(crate) struct Entry<V> {
    /// The value every reader shares.
    pub(crate) value: Arc<V>,
    /// Fresh until then; its coarse form is set at the start of the early-refresh window.
    fresh_until: Deadline,
    /// Servable as a stale copy for this many ms past `fresh_until` (saturating).
    stale_ms: u32,
    /// `delta·beta` in µs (saturating): how early XFetch may refresh it; 0 = never early.
    early_us: u32,
}

// A hit copies the entry out of L1 and misses on its cache line: keep it at four words.
const _: () = assert!(std::mem::size_of::<Entry<u64>>() == 32);

impl<V> Clone for Entry<V> {
    fn clone(&self) -> Self {
        Entry {
            value: Arc::clone(&self.value),
            fresh_until: self.fresh_until,
            stale_ms: self.stale_ms,
            early_us: self.early_us,
        }
    }
}

/// What a read finds in an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freshness {
    /// Fresh: answer with it.
    Fresh,
    /// Fresh, and this read drew an early refresh: answer with it and ask for a refresh.
    Refresh,
    /// Past its freshness: a miss.
    Expired,
}

/// XFetch's rule: refresh when `now − delta·beta·ln(u) ≥ fresh_until`, that is when
/// `delta·beta·(−ln u)` covers the `left` of the value's freshness; `u` is uniform in (0, 1].
pub(crate) fn xfetch(left: Duration, early: Duration, u: f64) -> bool {
    early.as_secs_f64() * -u.ln() >= left.as_secs_f64()
}

fn saturating_u32(n: u128) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl<V> Entry<V> {
    /// An entry fresh for `fresh_for` from now, then servable as stale for `stale_for` more;
    /// refreshed early by XFetch with `early` = `delta·beta` (zero: never).
    pub(crate) fn new(
        value: Arc<V>,
        fresh_for: Duration,
        stale_for: Duration,
        early: Duration,
    ) -> Self {
        let early_us = saturating_u32(early.as_micros());
        let window = Duration::from_micros(u64::from(early_us)).saturating_mul(EARLY_WINDOW_K);
        Entry {
            value,
            fresh_until: Deadline::early(fresh_for, window),
            stale_ms: saturating_u32(stale_for.as_millis()),
            early_us,
        }
    }

    /// The same entry, fresh for at most `limit` from now (its stale window ending when it did).
    /// A capped entry is not refreshed early: its deadline is not the value's.
    pub(crate) fn capped(self, limit: Duration) -> Self {
        let cap = Deadline::after(limit);
        if cap.moment() >= self.fresh_until.moment() {
            return self;
        }
        let stale_until = self.stale_until();
        Entry {
            fresh_until: cap,
            stale_ms: saturating_u32(stale_until.since(cap.moment()).as_millis()),
            early_us: 0,
            ..self
        }
    }

    /// A stale copy as L1's stand-in: fresh until `since` (past), servable as stale until
    /// `until`, never refreshed early.
    pub(crate) fn stand_in(value: Arc<V>, since: Moment, until: Moment) -> Self {
        Entry {
            value,
            fresh_until: Deadline::at(since),
            stale_ms: saturating_u32(until.since(since).as_millis()),
            early_us: 0,
        }
    }

    /// The same entry, fresh no longer, its stale window kept: what L1 holds while key tracking
    /// has not confirmed the bytes it was made from. A read then misses and reads Valkey, which
    /// would push no change of the key before the confirmation; a stale stand-in may still be it.
    pub(crate) fn unconfirmed(self) -> Self {
        self.capped(Duration::ZERO)
    }

    /// The same entry, with its early refresh asked for already: later hits draw no more.
    pub(crate) fn refresh_asked(self) -> Self {
        Entry {
            early_us: 0,
            ..self
        }
    }

    /// `true` while XFetch may still ask for an early refresh of this entry.
    pub(crate) fn refreshes_early(&self) -> bool {
        self.early_us != 0
    }

    /// `true` while the entry may answer a `get`.
    #[inline]
    pub(crate) fn is_fresh(&self) -> bool {
        self.fresh_until.is_ahead()
    }

    /// The hit path's check: the coarse clock alone before the early window; within it, the
    /// precise clock and (for an entry with a `delta·beta`) one XFetch draw.
    #[cfg(test)]
    pub(crate) fn freshness(&self) -> Freshness {
        self.freshness_at(crate::clock::coarse_ticks())
    }

    /// [`Entry::freshness`] with the coarse clock read at `now` ([`crate::clock::coarse_ticks`]).
    #[inline]
    pub(crate) fn freshness_at(&self, now: u64) -> Freshness {
        if self.fresh_until.is_surely_ahead_at(now) {
            return Freshness::Fresh;
        }
        self.freshness_in_the_window()
    }

    #[cold]
    fn freshness_in_the_window(&self) -> Freshness {
        let now = Moment::now();
        let until = self.fresh_until.moment();
        if now >= until {
            return Freshness::Expired;
        }
        if self.early_us == 0 {
            return Freshness::Fresh;
        }
        let early = Duration::from_micros(u64::from(self.early_us));
        // `1 - [0, 1)`: uniform in (0, 1], so that ln(u) is finite.
        let u = 1.0 - rand::random::<f64>();
        if xfetch(until.since(now), early, u) {
            Freshness::Refresh
        } else {
            Freshness::Fresh
        }
    }

    /// When its freshness ends, on the precise clock.
    pub(crate) fn fresh_until(&self) -> Moment {
        self.fresh_until.moment()
    }

    fn stale_until(&self) -> Moment {
        self.fresh_until
            .moment()
            .after(Duration::from_millis(u64::from(self.stale_ms)))
    }

    /// `(end of freshness, end of the stale window)` while the entry may stand in as a stale copy.
    pub(crate) fn stale_window(&self) -> Option<(Moment, Moment)> {
        let stale_until = self.stale_until();
        (Moment::now() < stale_until).then(|| (self.fresh_until.moment(), stale_until))
    }
}

#[cfg(test)]
mod tests;
