//! L1 idle expiry on quick_cache (`.l1_idle(d)`): an entry not read for `d` leaves L1. quick_cache
//! has no time-to-idle of its own (moka's is used on that backend), so each entry here carries the
//! coarse-clock tick of its last read, which a hit stamps; a hit on an entry idle too long is a
//! miss and drops it, and [`IdleL1::sweep`], run by the table every fraction of `d`, drops the
//! idle entries nobody reads. An idle table's hit copies an `Arc` more than a plain one: it is its
//! own enum variant, so tables without idle expiry keep the plain hit path.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::weigher::{Bound, Weigher, weigh};
use super::{Entry, L1Cache};
use crate::clock::{coarse_ticks, ticks_of};
use crate::events::{EventKind, EvictionCause, Evictions};
use crate::wire::key::Key;

/// An entry, its weight (1 when L1 counts entries), and when it was last read.
pub(crate) struct Slot<V> {
    entry: Entry<V>,
    weight: u64,
    read_at: Arc<AtomicU64>,
}

impl<V> Clone for Slot<V> {
    fn clone(&self) -> Self {
        Slot {
            entry: self.entry.clone(),
            weight: self.weight,
            read_at: Arc::clone(&self.read_at),
        }
    }
}

/// quick_cache's weighter: the weight kept with the slot.
#[derive(Clone)]
pub(crate) struct BySlot;

impl<K, V> quick_cache::Weighter<K, Slot<V>> for BySlot {
    fn weight(&self, _key: &K, slot: &Slot<V>) -> u64 {
        slot.weight
    }
}

/// quick_cache whose entries leave once idle for `idle`.
pub(crate) struct IdleL1<K, V> {
    cache:
        quick_cache::sync::Cache<K, Slot<V>, BySlot, quick_cache::DefaultHashBuilder, Evictions<K>>,
    weigher: Option<Weigher<K, V>>,
    idle_ticks: u64,
    /// Entries dropped for idleness, by a hit or a sweep.
    idled: AtomicU64,
    evictions: Evictions<K>,
}

impl<K: Key, V: Send + Sync + 'static> IdleL1<K, V> {
    /// Up to `bound` entries (or bytes), each leaving once not read for `idle`.
    pub(crate) fn new(bound: Bound<K, V>, idle: Duration, evictions: Evictions<K>) -> Self {
        let (entries, capacity, weigher) = match bound {
            Bound::Entries(n) => (n, n as u64, None),
            Bound::Bytes { capacity, weigher } => {
                let entries = usize::try_from(capacity / 1024).unwrap_or(usize::MAX);
                (entries.max(16), capacity, Some(weigher))
            }
        };
        IdleL1 {
            cache: quick_cache::sync::Cache::with(
                entries,
                capacity,
                BySlot,
                quick_cache::DefaultHashBuilder::default(),
                evictions.clone(),
            ),
            weigher,
            idle_ticks: ticks_of(idle),
            idled: AtomicU64::new(0),
            evictions,
        }
    }

    fn is_idle(&self, slot: &Slot<V>, now: u64) -> bool {
        now.saturating_sub(slot.read_at.load(Relaxed)) > self.idle_ticks
    }

    /// Drops every entry idle for longer than the table's `l1_idle`.
    pub(crate) fn sweep(&self) {
        let now = coarse_ticks();
        self.cache.retain(|id, slot| {
            let idle = self.is_idle(slot, now);
            if idle {
                self.left_idle(id);
            }
            !idle
        });
    }

    fn left_idle(&self, id: &K) {
        self.idled.fetch_add(1, Relaxed);
        let cause = EvictionCause::Idle;
        self.evictions
            .0
            .emit(Some(id), EventKind::Evicted { cause });
    }

    /// How many entries left L1 for idleness so far.
    pub(crate) fn idled(&self) -> u64 {
        self.idled.load(Relaxed)
    }

    fn slot(&self, id: &K, entry: Entry<V>) -> Slot<V> {
        let weight = self
            .weigher
            .as_ref()
            .map_or(1, |w| weigh(w, id, &entry.value));
        Slot {
            entry,
            weight,
            read_at: Arc::new(AtomicU64::new(coarse_ticks())),
        }
    }
}

impl<K: Key, V: Send + Sync + 'static> L1Cache<K, V> for IdleL1<K, V> {
    #[inline]
    fn get<Q>(&self, id: &Q) -> Option<Entry<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let slot = self.cache.get(id)?;
        let now = coarse_ticks();
        if self.is_idle(&slot, now) {
            let dropped = self
                .cache
                .remove_if(id, |s| Arc::ptr_eq(&s.read_at, &slot.read_at));
            if let Some((id, _)) = dropped {
                self.left_idle(&id);
            }
            return None;
        }
        // Stamped only when the tick moved: a hot entry's hits rarely write its line.
        if slot.read_at.load(Relaxed) != now {
            slot.read_at.store(now, Relaxed);
        }
        Some(slot.entry)
    }

    fn insert(&self, id: K, entry: Entry<V>) {
        let slot = self.slot(&id, entry);
        self.cache.insert(id, slot);
    }

    fn remove(&self, id: &K) {
        self.cache.remove(id);
    }

    fn clear(&self) {
        self.cache.clear();
    }

    fn retain(&self, keep: impl Fn(&K, &V) -> bool) {
        self.cache.retain(|id, slot| keep(id, &slot.entry.value));
    }

    fn cap(&self, life: Duration) {
        super::cap_each(&self.cache, |slot| {
            slot.entry = slot.entry.clone().capped(life)
        });
    }

    fn len(&self) -> u64 {
        self.cache.len() as u64
    }
}
