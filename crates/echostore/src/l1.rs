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

/// One cached value and its life.
pub(crate) struct Entry<V> {
    /// The value every reader shares.
    pub(crate) value: Arc<V>,
    /// Fresh until then.
    fresh_until: Deadline,
    /// Servable as a stale copy strictly before this instant.
    stale_until: Moment,
}

// A hit copies the entry out of L1 and misses on its cache line: keep it at four words.
const _: () = assert!(std::mem::size_of::<Entry<u64>>() == 32);

impl<V> Clone for Entry<V> {
    fn clone(&self) -> Self {
        Entry {
            value: Arc::clone(&self.value),
            fresh_until: self.fresh_until,
            stale_until: self.stale_until,
        }
    }
}

impl<V> Entry<V> {
    /// An entry fresh for `fresh_for` from now, then servable as stale for `stale_for` more.
    pub(crate) fn new(value: Arc<V>, fresh_for: Duration, stale_for: Duration) -> Self {
        let fresh_until = Deadline::after(fresh_for);
        Entry {
            value,
            fresh_until,
            stale_until: fresh_until.moment().after(stale_for),
        }
    }

    /// The same entry, fresh for at most `limit` from now (its stale window unchanged).
    pub(crate) fn capped(self, limit: Duration) -> Self {
        let cap = Deadline::after(limit);
        if cap.moment() >= self.fresh_until.moment() {
            return self;
        }
        Entry {
            fresh_until: cap,
            ..self
        }
    }

    /// `true` while the entry may answer a `get`.
    #[inline]
    pub(crate) fn is_fresh(&self) -> bool {
        self.fresh_until.is_ahead()
    }

    /// `(end of freshness, end of the stale window)` while the entry may stand in as a stale copy.
    pub(crate) fn stale_window(&self) -> Option<(Moment, Moment)> {
        (Moment::now() < self.stale_until).then(|| (self.fresh_until.moment(), self.stale_until))
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
    /// Entries held now.
    fn len(&self) -> u64;
}

/// The L1 of one table: one of the two backends.
///
/// An enum rather than a trait object, so that the hit path is a direct, inlinable call.
pub(crate) enum L1<K, V> {
    QuickCache(QuickCacheL1<K, V>),
    #[cfg(feature = "moka")]
    Moka(MokaL1<K, V>),
}

impl<K: Key, V: Send + Sync + 'static> L1<K, V> {
    /// An empty L1 on `backend` holding up to `capacity` entries.
    pub(crate) fn new(backend: L1Backend, capacity: usize) -> Self {
        match backend {
            L1Backend::QuickCache => {
                L1::QuickCache(QuickCacheL1(quick_cache::sync::Cache::new(capacity)))
            }
            #[cfg(feature = "moka")]
            L1Backend::Moka => L1::Moka(MokaL1(moka::sync::Cache::new(capacity as u64))),
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
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.get(id),
        }
    }

    fn insert(&self, id: K, entry: Entry<V>) {
        match self {
            L1::QuickCache(l1) => l1.insert(id, entry),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.insert(id, entry),
        }
    }

    fn remove(&self, id: &K) {
        match self {
            L1::QuickCache(l1) => l1.remove(id),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.remove(id),
        }
    }

    fn clear(&self) {
        match self {
            L1::QuickCache(l1) => l1.clear(),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.clear(),
        }
    }

    fn len(&self) -> u64 {
        match self {
            L1::QuickCache(l1) => l1.len(),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.len(),
        }
    }
}

/// quick_cache's sync cache.
pub(crate) struct QuickCacheL1<K, V>(quick_cache::sync::Cache<K, Entry<V>>);

impl<K: Key, V: Send + Sync + 'static> L1Cache<K, V> for QuickCacheL1<K, V> {
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

    fn len(&self) -> u64 {
        // moka applies evictions lazily; settle them so the gauge is exact.
        self.0.run_pending_tasks();
        self.0.entry_count()
    }
}
