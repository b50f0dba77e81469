//! L1: the caller-side, in-process copy of recent values — EchoStore's stand-in for an ETS table
//! with read concurrency. This module owns the backends and the one interface they share
//! ([`L1Cache`]); what an entry holds and when it may answer is [`entry`]'s.
//!
//! A read of L1 runs on the caller's own task and never touches the owner. An entry past its
//! freshness is a miss for `get`, but the fill may still serve it as a stale copy (fail-safe).
//! Two backends sit behind [`L1Cache`]: quick_cache (the default, the faster hit) and moka (slower
//! per hit; the figures are in `docs/benchmarks.md`). Both are bounded by the table's
//! `l1_capacity`, or with a weigher by bytes ([`weigher`]), and evict on their own when full.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "moka")]
use crate::events::{EventKind, EvictionCause};
use crate::events::{Events, Evictions};
use crate::wire::key::Key;

mod entry;
mod idle;
mod weigher;

pub(crate) use entry::{Entry, Freshness};
use idle::IdleL1;
use weigher::WeighedL1;
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
    /// Keeps every entry for at most `life` from now (coherence lost: none can be confirmed).
    fn cap(&self, life: std::time::Duration);
    /// Entries held now.
    fn len(&self) -> u64;
}

/// The L1 of one table: one of the two backends.
///
/// An enum rather than a trait object, so that the hit path is a direct, inlinable call.
pub(crate) enum L1<K, V> {
    /// quick_cache bounded by a count of entries: the default.
    Entries(QuickCacheL1<K, V>),
    /// quick_cache bounded by the table's weigher (`l1/weigher.rs`).
    Weighed(WeighedL1<K, V>),
    /// quick_cache whose entries leave once idle (`.l1_idle`, `l1/idle.rs`), by entries or bytes.
    Idle(IdleL1<K, V>),
    #[cfg(feature = "moka")]
    Moka(MokaL1<K, V>),
}

impl<K: Key, V: Send + Sync + 'static> L1<K, V> {
    /// An empty L1 on `backend`, holding up to `bound` entries or bytes; with `idle`, an entry not
    /// read for that long leaves.
    /// Evictions for room, and for idleness, are sent to `events`.
    pub(crate) fn new(
        backend: L1Backend,
        bound: Bound<K, V>,
        idle: Option<Duration>,
        events: &Arc<Events<K>>,
    ) -> Self {
        let evictions = Evictions(Arc::clone(events));
        match (backend, bound, idle) {
            (L1Backend::QuickCache, bound, Some(idle)) => {
                L1::Idle(IdleL1::new(bound, idle, evictions))
            }
            (L1Backend::QuickCache, Bound::Entries(capacity), None) => {
                L1::Entries(QuickCacheL1(quick_cache::sync::Cache::with(
                    capacity,
                    capacity as u64,
                    quick_cache::UnitWeighter,
                    quick_cache::DefaultHashBuilder::default(),
                    evictions,
                )))
            }
            (L1Backend::QuickCache, Bound::Bytes { capacity, weigher }, None) => {
                L1::Weighed(WeighedL1::new(capacity, weigher, evictions))
            }
            #[cfg(feature = "moka")]
            (L1Backend::Moka, bound, idle) => L1::Moka(MokaL1::new(bound, idle, evictions)),
        }
    }

    /// Drops the entries idle past the table's `l1_idle` now, rather than at their next read or
    /// the backend's next upkeep; a no-op without idle expiry.
    pub(crate) fn sweep_idle(&self) {
        match self {
            L1::Idle(l1) => l1.sweep(),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.0.run_pending_tasks(),
            _ => {}
        }
    }

    /// How many entries left L1 for idleness.
    pub(crate) fn idled(&self) -> u64 {
        match self {
            L1::Idle(l1) => l1.idled(),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.1.load(std::sync::atomic::Ordering::Relaxed),
            _ => 0,
        }
    }
}

impl<K: Key, V: Send + Sync + 'static> L1Cache<K, V> for L1<K, V> {
    // Inline in the caller's hit path: one call fewer between one hit's lookup and the next's.
    #[inline(always)]
    fn get<Q>(&self, id: &Q) -> Option<Entry<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self {
            L1::Entries(l1) => l1.get(id),
            L1::Weighed(l1) => l1.get(id),
            L1::Idle(l1) => l1.get(id),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.get(id),
        }
    }

    fn insert(&self, id: K, entry: Entry<V>) {
        match self {
            L1::Entries(l1) => l1.insert(id, entry),
            L1::Weighed(l1) => l1.insert(id, entry),
            L1::Idle(l1) => l1.insert(id, entry),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.insert(id, entry),
        }
    }

    fn remove(&self, id: &K) {
        match self {
            L1::Entries(l1) => l1.remove(id),
            L1::Weighed(l1) => l1.remove(id),
            L1::Idle(l1) => l1.remove(id),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.remove(id),
        }
    }

    fn clear(&self) {
        match self {
            L1::Entries(l1) => l1.clear(),
            L1::Weighed(l1) => l1.clear(),
            L1::Idle(l1) => l1.clear(),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.clear(),
        }
    }

    fn retain(&self, keep: impl Fn(&K, &V) -> bool) {
        match self {
            L1::Entries(l1) => l1.retain(keep),
            L1::Weighed(l1) => l1.retain(keep),
            L1::Idle(l1) => l1.retain(keep),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.retain(keep),
        }
    }

    fn cap(&self, life: std::time::Duration) {
        match self {
            L1::Entries(l1) => l1.cap(life),
            L1::Weighed(l1) => l1.cap(life),
            L1::Idle(l1) => l1.cap(life),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.cap(life),
        }
    }

    fn len(&self) -> u64 {
        match self {
            L1::Entries(l1) => l1.len(),
            L1::Weighed(l1) => l1.len(),
            L1::Idle(l1) => l1.len(),
            #[cfg(feature = "moka")]
            L1::Moka(l1) => l1.len(),
        }
    }
}

/// quick_cache's sync cache.
pub(crate) struct QuickCacheL1<K, V, W = quick_cache::UnitWeighter>(
    quick_cache::sync::Cache<K, Entry<V>, W, quick_cache::DefaultHashBuilder, Evictions<K>>,
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

    fn cap(&self, life: std::time::Duration) {
        cap_each(&self.0, |entry| *entry = entry.clone().capped(life));
    }

    fn len(&self) -> u64 {
        self.0.len() as u64
    }
}

/// Changes each entry of `cache` with `cap`, in place under its shard's lock. Inserting a changed
/// copy of what a pass looked at instead would undo a write of the id made in between (an owner's,
/// or a flight's landing on its own task, while the pass runs on another task): L1 would go back.
pub(crate) fn cap_each<K, T, W, L>(
    cache: &quick_cache::sync::Cache<K, T, W, quick_cache::DefaultHashBuilder, L>,
    cap: impl Fn(&mut T),
) where
    K: Eq + Hash + Clone,
    T: Clone,
    W: quick_cache::Weighter<K, T> + Clone,
    L: quick_cache::Lifecycle<K, T> + Clone,
{
    for (id, _) in cache.iter() {
        // An entry gone since the pass saw it stays gone (the guard of a vacant slot is dropped
        // unused); L1 takes no placeholders, so none is waited for.
        let _ = cache.entry(&id, Some(Duration::ZERO), |_, entry| {
            cap(entry);
            quick_cache::sync::EntryAction::Retain(())
        });
    }
}

/// moka's sync cache, and how many of its entries left for idleness (its time-to-idle).
#[cfg(feature = "moka")]
pub(crate) struct MokaL1<K, V>(
    moka::sync::Cache<K, Entry<V>>,
    Arc<std::sync::atomic::AtomicU64>,
);

#[cfg(feature = "moka")]
impl<K: Key, V: Send + Sync + 'static> MokaL1<K, V> {
    fn new(bound: Bound<K, V>, idle: Option<Duration>, evictions: Evictions<K>) -> Self {
        let builder = match bound {
            Bound::Entries(capacity) => moka::sync::Cache::builder().max_capacity(capacity as u64),
            Bound::Bytes { capacity, weigher } => moka::sync::Cache::builder()
                .max_capacity(capacity)
                .weigher(move |key: &K, entry: &Entry<V>| {
                    u32::try_from(weigher::weigh(&weigher, key, &entry.value)).unwrap_or(u32::MAX)
                }),
        };
        let idled = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = Arc::clone(&idled);
        let builder = builder.eviction_listener(move |id: Arc<K>, _, removal| {
            use moka::notification::RemovalCause;
            let cause = match removal {
                RemovalCause::Size => EvictionCause::Size,
                // Idle expiry is the only expiry this cache is given.
                RemovalCause::Expired => {
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    EvictionCause::Idle
                }
                RemovalCause::Explicit | RemovalCause::Replaced => return,
            };
            evictions
                .0
                .emit_owned(K::clone(&id), EventKind::Evicted { cause });
        });
        let cache = match idle {
            None => builder.build(),
            Some(idle) => builder.time_to_idle(idle).build(),
        };
        MokaL1(cache, idled)
    }
}

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

    /// moka cannot change an entry in place against its plain inserts and removals, so each
    /// entry the cap would shorten is dropped instead: a removal can only cost a miss, where
    /// inserting the copy looked at could undo a write made meanwhile.
    fn cap(&self, life: std::time::Duration) {
        let cap = crate::clock::Deadline::after(life).moment();
        for (id, entry) in self.0.iter() {
            if entry.fresh_until() > cap {
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
