//! Under key tracking, the L1 entries waiting for Valkey to confirm them: each with the
//! fingerprint of the bytes it was read or written as, and the entry at its full life. L1 holds
//! the entry capped at `unconfirmed_l1_life` meanwhile; once the tracking connection has read the
//! key and found those bytes (`crate::coherence::tracking::keys`), the owner gives L1 the full entry.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

use super::Entry;
use crate::valkey::envelope::Fingerprint;

/// The entries waiting, by id: the latest one of each id.
pub(crate) struct Unconfirmed<K, V> {
    waiting: Mutex<HashMap<K, (Fingerprint, Entry<V>)>>,
}

impl<K: Eq + Hash, V> Unconfirmed<K, V> {
    pub(crate) fn new() -> Self {
        Unconfirmed {
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// `full` (made from `fingerprint`'s bytes) waits for its confirmation, replacing an older
    /// entry of `id`.
    pub(crate) fn wait(&self, id: K, fingerprint: Fingerprint, full: Entry<V>) {
        self.lock().insert(id, (fingerprint, full));
    }

    /// The entry of `id` that waits for `fingerprint`'s bytes, taken; `None` when a later entry
    /// replaced it (its own confirmation follows) or none waits.
    pub(crate) fn take(&self, id: &K, fingerprint: Fingerprint) -> Option<Entry<V>> {
        let mut waiting = self.lock();
        match waiting.get(id) {
            Some((waits_for, _)) if *waits_for == fingerprint => waiting.remove(id).map(|(_, e)| e),
            _ => None,
        }
    }

    /// Nothing waits any more (L1 was flushed: the confirmations on their way are of nothing).
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (Fingerprint, Entry<V>)>> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
