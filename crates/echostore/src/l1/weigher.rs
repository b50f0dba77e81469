//! L1 bounded by bytes rather than entries: the table's `.l1_weigher(|k, v| bytes)` weighs each
//! entry as it is stored, and `.l1_capacity_bytes(n)` bounds their sum, on either backend.
//!
//! Only a store weighs: a hit reads an entry as an unweighed L1 does (the quick_cache backend is
//! its own enum variant, so the unweighed hit path is unchanged). A weigher that panics weighs its
//! entry as one byte (logged), and no entry weighs zero (quick_cache would never evict it).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::Entry;

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

/// The weigher as quick_cache takes it.
pub(crate) struct ByWeigher<K, V>(pub(crate) Weigher<K, V>);

impl<K, V> Clone for ByWeigher<K, V> {
    fn clone(&self) -> Self {
        ByWeigher(Arc::clone(&self.0))
    }
}

impl<K, V> quick_cache::Weighter<K, Entry<V>> for ByWeigher<K, V> {
    fn weight(&self, key: &K, entry: &Entry<V>) -> u64 {
        weigh(&self.0, key, &entry.value)
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
