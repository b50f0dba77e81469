//! Where a table's handles find its owner: [`OwnerRef`], a slot that the supervisor points at a
//! restarted owner after a crash, and through which calls and coherence pushes reach the owner
//! that is current.

use std::sync::{Arc, RwLock, Weak};

use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorRef, RpcReplyPort};

use crate::coherence::Sink;
use crate::core::TableCore;
use crate::envelope::Fingerprint;
use crate::error::{Error, Result};
use crate::key::{Key, Value};
use crate::owner::{Owner, OwnerMsg};
use crate::stats::bump;
use crate::supervisor::Restart;
use crate::tracking::keys::Found;

/// Where the handles find the current owner; the supervisor swaps it after a restart.
pub(crate) struct OwnerRef<K, V> {
    slot: RwLock<ActorRef<OwnerMsg<K, V>>>,
}

impl<K: Key, V: Value> OwnerRef<K, V> {
    /// Starts the owner of `core` under `supervisor`, with a way to restart it after a crash.
    pub(crate) async fn start(
        core: &Arc<TableCore<K, V>>,
        supervisor: ActorCell,
    ) -> Result<(Arc<Self>, Restart)> {
        let (owner, _) = Actor::spawn_linked(None, Owner::new(), Arc::clone(core), supervisor)
            .await
            .map_err(|_| Error::Stopped)?;
        let this = Arc::new(OwnerRef {
            slot: RwLock::new(owner),
        });
        let restart = restarter(Arc::clone(core), Arc::downgrade(&this));
        Ok((this, restart))
    }

    /// The owner now.
    pub(crate) fn current(&self) -> ActorRef<OwnerMsg<K, V>> {
        self.slot
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Calls the owner; a dead owner (or one that dies mid-call) answers [`Error::Stopped`].
    pub(crate) async fn call<T: Send + 'static>(
        &self,
        message: impl FnOnce(RpcReplyPort<Result<T>>) -> OwnerMsg<K, V>,
    ) -> Result<T> {
        match self.current().call(message, None).await {
            Ok(CallResult::Success(answer)) => answer,
            _ => Err(Error::Stopped),
        }
    }
}

impl<K: Key, V: Value> Sink for OwnerRef<K, V> {
    fn invalidated(&self, id: &[u8]) {
        let message = match K::from_rendered(id) {
            Some(id) => OwnerMsg::Invalidated { id, checked: false },
            None => OwnerMsg::Flush, // an id this key type cannot parse back: drop all of L1
        };
        let _ = self.current().cast(message);
    }

    fn flush(&self) {
        let _ = self.current().cast(OwnerMsg::Flush);
    }

    fn marks_changed(&self) {
        let _ = self.current().cast(OwnerMsg::MarksChanged { full: false });
    }

    fn confirmed(&self, id: &[u8], fingerprint: Fingerprint, found: Found) {
        // An id this key type cannot parse back was never kept capped-and-waiting: nothing to do.
        if let Some(id) = K::from_rendered(id) {
            let _ = self.current().cast(OwnerMsg::Confirmed {
                id,
                fingerprint,
                found,
            });
        }
    }
}

/// How the supervisor replaces this table's owner after a crash.
fn restarter<K: Key, V: Value>(core: Arc<TableCore<K, V>>, owner: Weak<OwnerRef<K, V>>) -> Restart {
    Box::new(move |supervisor: ActorCell| {
        let core = Arc::clone(&core);
        let owner = owner.clone();
        Box::pin(async move {
            let owner = owner.upgrade()?; // every handle is gone: nothing to restart for
            let (fresh, _) = Actor::spawn_linked(None, Owner::new(), Arc::clone(&core), supervisor)
                .await
                .ok()?;
            // Handles point at the new owner before the restart is counted.
            *owner
                .slot
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh.clone();
            // Until the handles pointed here, pushes went to the dead owner and were lost, and
            // the dead owner's writes still on the wire will land with nobody to take them: L1
            // may hold what Valkey no longer does, so every id is unknown. (Without a Valkey, L1
            // is the only copy and nothing was lost.)
            if core.l2.is_some() {
                let _ = fresh.cast(OwnerMsg::Restarted);
            }
            bump(&core.stats.counters.owner_restarts);
            Some(fresh.get_cell())
        })
    })
}
