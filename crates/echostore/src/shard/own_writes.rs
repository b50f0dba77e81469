//! A process's own writes as coherence sees them: the pushes they cause come back to the writer
//! ([`OwnWrites`]); `docs/coherence.md`, "The self-push", has the argument and the cost. What is
//! expected of each id is in its state on the board (`IdState::own`), changed here by the owner.

use std::hash::Hash;

use crate::coherence::Tracking;
use crate::shard::flights::{Flights, tidy};
use crate::state::board::IdState;
use crate::valkey::envelope::Fingerprint;

/// Whether this process expects the pushes of its own writes, and the moves of what it expects
/// per id: the envelopes it is writing, whose pushes are its own. A push taken for one is not
/// trusted blindly — the owner reads the value back and drops L1 only if Valkey holds something
/// else (another write may have landed in the same event-loop turn, and Valkey sends one push
/// for both).
///
/// Under key tracking none is expected: Valkey pushes a write only to a store that read the key
/// since its last change, which the writer cannot tell when it writes, so an expectation could
/// wait for a push that never comes, and put the read back in front of another process's push.
/// There every push drops the id, the store's own included.
pub(crate) struct OwnWrites {
    expects: bool,
}

impl OwnWrites {
    /// `mode`: the store's tracking.
    pub(crate) fn new(mode: Tracking) -> Self {
        OwnWrites {
            expects: mode == Tracking::Broadcast,
        }
    }

    /// This process is about to write an envelope with `fingerprint` under `id`.
    pub(crate) fn expect<K: Eq + Hash + Clone, V, W>(
        &self,
        flights: &Flights<K, V, W>,
        id: &K,
        fingerprint: Fingerprint,
    ) {
        if self.expects {
            let mut ids = flights.ids();
            let state = ids.entry(id.clone()).or_insert(IdState::NOTHING);
            state.own.push_back(fingerprint);
        }
    }

    /// The write of `fingerprint` under `id` did not store it (a newer value was there, its lock
    /// was gone, or it failed): no push of it is to be expected. (One of a write that failed
    /// after all lands as another process's write would: it drops the id from L1.)
    pub(crate) fn withdraw<K: Eq + Hash + Clone, V, W>(
        &self,
        flights: &Flights<K, V, W>,
        id: &K,
        fingerprint: Fingerprint,
    ) {
        let mut ids = flights.ids();
        if let Some(state) = ids.get_mut(id)
            && let Some(at) = state.own.iter().position(|f| *f == fingerprint)
        {
            state.own.remove(at);
            tidy(&mut ids, id);
        }
    }

    /// A push for `id` arrived: the oldest own write it may stand for, if any.
    pub(crate) fn take<K: Eq + Hash + Clone, V, W>(
        &self,
        flights: &Flights<K, V, W>,
        id: &K,
    ) -> Option<Fingerprint> {
        let mut ids = flights.ids();
        let fingerprint = ids.get_mut(id)?.own.pop_front();
        tidy(&mut ids, id);
        fingerprint
    }

    /// Pushes were lost: nothing is expected any more.
    pub(crate) fn clear<K: Eq + Hash + Clone, V, W>(&self, flights: &Flights<K, V, W>) {
        flights.ids().retain(|_, state| {
            state.own.clear();
            !state.is_empty()
        });
    }
}
