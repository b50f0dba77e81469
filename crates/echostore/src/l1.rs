//! L1: the caller-side, in-process copy of recent values — EchoStore's stand-in for an ETS table
//! with read concurrency.
//!
//! A read of L1 runs on the caller's own task and never touches the owner. Entries carry the
//! deadline of their freshness (checked cheaply, see [`crate::clock`]) and the instant they stop
//! being servable as stale; an entry past its freshness is a miss for `get`, but the fill may still
//! serve it as a stale copy (fail-safe).
//! Two backends sit behind [`L1Cache`]: quick_cache (the default; a hit costs tens of nanoseconds)
//! and moka (about a microsecond a hit on this machine class; see `docs/benchmarks.md`). Both are
//! bounded by the table's `l1_capacity` and evict on their own when full.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use std::time::Duration;

use crate::clock::{Deadline, Moment};

use crate::key::Key;

mod weigher;

use weigher::ByWeigher;
pub(crate) use weigher::{Bound, Weigher};

/// Which cache library holds a table's L1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum L1Backend {
    /// `quick_cache::sync::Cache` (S3-FIFO-like, sharded): the fastest hit; the default.
    #[default]
    QuickCache,
    /// `moka::sync::Cache` (TinyLFU): the design card's original choice, slower per hit. Needs
    /// the `moka` feature (on by default).
    #[cfg(feature = "moka")]
    Moka,
}

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
    #[inline]
    pub(crate) fn freshness(&self) -> Freshness {
        if self.fresh_until.is_surely_ahead() {
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

/// The small interface both L1 backends implement.
pub(crate) trait L1Cache<K, V>: Send + Sync + 'static {
    /// The entry for `id`, fresh or not. `id` may be a borrowed form of the key (`&str` for a
    /// `String` key), as with `HashMap::get`.
    fn get<Q>(&self, id: &Q) -> Option<Entry<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized;
    /// Stores or replaces the entry for `id`; may evict others to stay within capacity.
    fn insert(&self, id: K, entry: Entry<V>);
    /// Drops the entry for `id`, if any.
    fn remove(&self, id: &K);
    /// Drops every entry (coherence lost: any of them may be out of date).
    fn clear(&self);
    /// Keeps only the entries for which `keep` is `true` (a tag was invalidated).
    fn retain(&self, keep: impl Fn(&K, &V) -> bool);
    /// Entries held now.
    fn len(&self) -> u64;
}

/// The L1 of one table: one of the two backends.
///
/// An enum rather than a trait object, so that the hit path is a direct, inlinable call.
pub(crate) enum L1<K, V> {
    QuickCache(QuickCacheL1<K, V>),
    /// quick_cache bounded by the table's weigher (`l1/weigher.rs`).
    QuickCacheWeighed(QuickCacheL1<K, V, ByWeigher<K, V>>),
    #[cfg(feature = "moka")]
    Moka(MokaL1<K, V>),
}

impl<K: Key, V: Send + Sync + 'static> L1<K, V> {
    /// An empty L1 on `backend`, holding up to `bound` entries or bytes.
    pub(crate) fn new(backend: L1Backend, bound: Bound<K, V>) -> Self {
        match (backend, bound) {
            (L1Backend::QuickCache, Bound::Entries(capacity)) => {
                L1::QuickCache(QuickCacheL1(quick_cache::sync::Cache::new(capacity)))
            }
            (L1Backend::QuickCache, Bound::Bytes { capacity, weigher }) => {
                // quick_cache sizes its tables by an estimate of the entries: one per KiB.
                let entries = usize::try_from(capacity / 1024)
                    .unwrap_or(usize::MAX)
                    .max(16);
                let cache =
                    quick_cache::sync::Cache::with_weighter(entries, capacity, ByWeigher(weigher));
                L1::QuickCacheWeighed(QuickCacheL1(cache))
            }
            #[cfg(feature = "moka")]
            (L1Backend::Moka, Bound::Entries(capacity)) => {
                L1::Moka(MokaL1(moka::sync::Cache::new(capacity as u64)))
            }
            #[cfg(feature = "moka")]
            (L1Backend::Moka, Bound::Bytes { capacity, weigher }) => {
                let cache = moka::sync::Cache::builder()
                    .max_capacity(capacity)
                    .weigher(move |key: &K, entry: &Entry<V>| {
                        u32::try_from(weigher::weigh(&weigher, key, &entry.value))
                            .unwrap_or(u32::MAX)
                    })
                    .build();
                L1::Moka(MokaL1(cache))
            }
        }
    }
}

impl<K: Key, V: Send + Sync + 'static> L1Cache<K, V> for L1<K, V> {
    #[inline]
    fn get<Q>(&self, id: &Q) -> Option<Entry<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self {
            L1::QuickCache(l1) => l1.get(id),
            L1::QuickCacheWeighed(l1) => l1.get(id),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.get(id),
        }
    }

    fn insert(&self, id: K, entry: Entry<V>) {
        match self {
            L1::QuickCache(l1) => l1.insert(id, entry),
            L1::QuickCacheWeighed(l1) => l1.insert(id, entry),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.insert(id, entry),
        }
    }

    fn remove(&self, id: &K) {
        match self {
            L1::QuickCache(l1) => l1.remove(id),
            L1::QuickCacheWeighed(l1) => l1.remove(id),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.remove(id),
        }
    }

    fn clear(&self) {
        match self {
            L1::QuickCache(l1) => l1.clear(),
            L1::QuickCacheWeighed(l1) => l1.clear(),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.clear(),
        }
    }

    fn retain(&self, keep: impl Fn(&K, &V) -> bool) {
        match self {
            L1::QuickCache(l1) => l1.retain(keep),
            L1::QuickCacheWeighed(l1) => l1.retain(keep),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.retain(keep),
        }
    }

    fn len(&self) -> u64 {
        match self {
            L1::QuickCache(l1) => l1.len(),
            L1::QuickCacheWeighed(l1) => l1.len(),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.len(),
        }
    }
}

/// quick_cache's sync cache.
pub(crate) struct QuickCacheL1<K, V, W = quick_cache::UnitWeighter>(
    quick_cache::sync::Cache<K, Entry<V>, W>,
);

impl<K: Key, V: Send + Sync + 'static, W> L1Cache<K, V> for QuickCacheL1<K, V, W>
where
    W: quick_cache::Weighter<K, Entry<V>> + Clone + Send + Sync + 'static,
{
    #[inline]
    fn get<Q>(&self, id: &Q) -> Option<Entry<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.get(id)
    }

    fn insert(&self, id: K, entry: Entry<V>) {
        self.0.insert(id, entry);
    }

    fn remove(&self, id: &K) {
        self.0.remove(id);
    }

    fn clear(&self) {
        self.0.clear();
    }

    fn retain(&self, keep: impl Fn(&K, &V) -> bool) {
        self.0.retain(|id, entry| keep(id, &entry.value));
    }

    fn len(&self) -> u64 {
        self.0.len() as u64
    }
}

/// moka's sync cache.
#[cfg(feature = "moka")]
pub(crate) struct MokaL1<K, V>(moka::sync::Cache<K, Entry<V>>);

#[cfg(feature = "moka")]
impl<K: Key, V: Send + Sync + 'static> L1Cache<K, V> for MokaL1<K, V> {
    #[inline]
    fn get<Q>(&self, id: &Q) -> Option<Entry<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.get(id)
    }

    fn insert(&self, id: K, entry: Entry<V>) {
        self.0.insert(id, entry);
    }

    fn remove(&self, id: &K) {
        self.0.invalidate(id);
    }

    fn clear(&self) {
        self.0.invalidate_all();
    }

    fn retain(&self, keep: impl Fn(&K, &V) -> bool) {
        for (id, entry) in self.0.iter() {
            if !keep(&id, &entry.value) {
                self.0.invalidate(&*id);
            }
        }
    }

    fn len(&self) -> u64 {
        // moka applies evictions lazily; settle them so the gauge is exact.
        self.0.run_pending_tasks();
        self.0.entry_count()
    }
}

#[cfg(test)]
mod tests;
