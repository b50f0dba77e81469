//! A process's own writes as coherence sees them: the pushes they cause come back to the writer
//! ([`OwnWrites`]); `docs/coherence.md`, "The self-push", has the argument and the cost.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use crate::coherence::Tracking;
use crate::valkey::envelope::Fingerprint;

/// The envelopes this process is writing, per id: the pushes they cause are its own. A push
/// taken for one is not trusted blindly — the owner reads the value back and drops L1 only
/// if Valkey holds something else (another write may have landed in the same event-loop turn,
/// and Valkey sends one push for both).
///
/// Under key tracking none is expected: Valkey pushes a write only to a store that read the key
/// since its last change, which the writer cannot tell when it writes, so an expectation could
/// wait for a push that never comes, and put the read back in front of another process's push.
/// There every push drops the id, the store's own included.
pub(crate) struct OwnWrites<K> {
    pending: HashMap<K, VecDeque<Fingerprint>>,
    expects: bool,
}

impl<K: Eq + Hash + Clone> OwnWrites<K> {
    /// `mode`: the store's tracking.
    pub(crate) fn new(mode: Tracking) -> Self {
        OwnWrites {
            pending: HashMap::new(),
            expects: mode == Tracking::Broadcast,
        }
    }

    /// This process is about to write an envelope with `fingerprint` under `id`.
    pub(crate) fn expect(&mut self, id: &K, fingerprint: Fingerprint) {
        if !self.expects {
            return;
        }
        self.pending
            .entry(id.clone())
            .or_default()
            .push_back(fingerprint);
    }

    /// A push for `id` arrived: the oldest own write it may stand for, if any.
    pub(crate) fn take(&mut self, id: &K) -> Option<Fingerprint> {
        let queue = self.pending.get_mut(id)?;
        let fingerprint = queue.pop_front();
        if queue.is_empty() {
            self.pending.remove(id);
        }
        fingerprint
    }

    /// Pushes were lost: nothing is expected any more.
    pub(crate) fn clear(&mut self) {
        self.pending.clear();
    }
}
