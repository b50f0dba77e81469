//! L1 bounded by bytes rather than entries: the table's `.l1_weigher(|k, v| bytes)` weighs each
//! entry as it is stored, and `.l1_capacity_bytes(n)` bounds their sum, on either backend.
//!
//! Only a store weighs, once: the weight is kept with the entry ([`Weighed`]), and quick_cache
//! reads it back whenever it accounts for the entry (on insert, replace and eviction), so the
//! accounting never depends on the weigher answering the same twice. A hit reads an entry as an
//! unweighed L1 does (the weighed backend is its own enum variant, so the unweighed hit path is
//! unchanged). A weigher that panics weighs its entry as one byte (logged), and no entry weighs
//! zero (quick_cache would never evict it).

use std::borrow::Borrow;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::{Entry, L1Cache};
use crate::wire::key::Key;

/// A table's `.l1_weigher`: an entry's size in bytes, as the user counts it.
pub(crate) type Weigher<K, V> = Arc<dyn Fn(&K, &V) -> u64 + Send + Sync>;

/// How L1 is bounded: a count of entries, or the weigher's bytes.
#[derive(Clone)]
pub(crate) enum Bound<K, V> {
    Entries(usize),
    Bytes {
        capacity: u64,
        weigher: Weigher<K, V>,
    },
}

/// An entry with the weight the weigher gave it when it was stored.
pub(crate) struct Weighed<V> {
    entry: Entry<V>,
    weight: u64,
}

impl<V> Clone for Weighed<V> {
    fn clone(&self) -> Self {
        Weighed {
            entry: self.entry.clone(),
            weight: self.weight,
        }
    }
}

/// quick_cache's weighter: the weight kept with the entry.
#[derive(Clone)]
pub(crate) struct ByWeight;

impl<K, V> quick_cache::Weighter<K, Weighed<V>> for ByWeight {
    fn weight(&self, _key: &K, weighed: &Weighed<V>) -> u64 {
        weighed.weight
    }
}

/// quick_cache bounded by the table's weigher.
pub(crate) struct WeighedL1<K, V> {
    cache: quick_cache::sync::Cache<
        K,
        Weighed<V>,
        ByWeight,
        quick_cache::DefaultHashBuilder,
        crate::events::Evictions<K>,
    >,
    weigher: Weigher<K, V>,
}

impl<K: Key, V: Send + Sync + 'static> WeighedL1<K, V> {
    /// Up to `capacity` bytes as `weigher` counts them.
    pub(crate) fn new(
        capacity: u64,
        weigher: Weigher<K, V>,
        evictions: crate::events::Evictions<K>,
    ) -> Self {
        // quick_cache sizes its tables by an estimate of the entries: one per KiB.
        let entries = usize::try_from(capacity / 1024)
            .unwrap_or(usize::MAX)
            .max(16);
        let cache = quick_cache::sync::Cache::with(
            entries,
            capacity,
            ByWeight,
            quick_cache::DefaultHashBuilder::default(),
            evictions,
        );
        WeighedL1 { cache, weigher }
    }
}

impl<K: Key, V: Send + Sync + 'static> L1Cache<K, V> for WeighedL1<K, V> {
    #[inline]
    fn get<Q>(&self, id: &Q) -> Option<Entry<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.cache.get(id).map(|weighed| weighed.entry)
    }

    fn insert(&self, id: K, entry: Entry<V>) {
        let weight = weigh(&self.weigher, &id, &entry.value);
        self.cache.insert(id, Weighed { entry, weight });
    }

    fn remove(&self, id: &K) {
        self.cache.remove(id);
    }

    fn clear(&self) {
        self.cache.clear();
    }

    fn retain(&self, keep: impl Fn(&K, &V) -> bool) {
        self.cache
            .retain(|id, weighed| keep(id, &weighed.entry.value));
    }

    fn cap(&self, life: std::time::Duration) {
        super::cap_each(&self.cache, |w| w.entry = w.entry.clone().capped(life));
    }

    fn len(&self) -> u64 {
        self.cache.len() as u64
    }
}

/// The weight of one entry: at least 1, and 1 if the weigher panics.
pub(crate) fn weigh<K, V>(weigher: &Weigher<K, V>, key: &K, value: &V) -> u64 {
    match std::panic::catch_unwind(AssertUnwindSafe(|| weigher(key, value))) {
        Ok(bytes) => bytes.max(1),
        Err(_) => {
            tracing::warn!("l1_weigher panicked: the entry weighs one byte");
            1
        }
    }
}
