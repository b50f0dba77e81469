//! A `put` or `invalidate` on its way to Valkey: the write itself (the versioned put script, or
//! the `DEL` of value and lock), what its caller hears, and what it leaves in L1 once it lands.
//! What a write is while it waits for its turn is `crate::state::pending_write`.

use crate::error::Error;
use crate::state::core::TableCore;
use crate::state::l1::Entry;
pub(crate) use crate::state::pending_write::{L2Write, PendingWrite, Stamp};
use crate::state::stats::bump;
use crate::state::unsettled::Repair;
use crate::valkey::lock::{self, Put};
use crate::wire::key::Key;

impl<V> PendingWrite<V> {
    /// Writes to Valkey and answers the caller; returns the entry L1 may keep (none when the
    /// write failed or a newer value was already stored).
    ///
    /// A write that fails marks the id unsettled ([`crate::state::unsettled`]) before its caller hears
    /// of it, so the id's Valkey copy is repaired and no read here trusts it meanwhile; one that
    /// lands settles it.
    pub(crate) async fn apply<K: Key>(self, core: &TableCore<K, V>, id: &K) -> Option<Entry<V>>
    where
        V: Send + Sync + 'static,
    {
        let PendingWrite {
            write,
            entry,
            reply,
        } = self;
        let Some(l2) = &core.l2 else {
            let _ = reply.send(Ok(None));
            return entry;
        };
        let names = match &write {
            L2Write::Put { names, .. } | L2Write::Invalidate { names } => names.clone(),
        };
        let applied = match write {
            L2Write::Put {
                names,
                envelope,
                px,
            } => lock::versioned_put(l2, &names, envelope, px).await,
            L2Write::Invalidate { names } => l2
                .invalidate(&names)
                .await
                .map(|()| Put::Written { at_ms: None }),
        };
        let (keep, answer) = match applied {
            Ok(Put::Written { at_ms }) => {
                core.unsettled.settle(id);
                (entry, Ok(at_ms))
            }
            Ok(Put::Superseded) => {
                bump(&core.stats.counters.writes_superseded);
                (None, Err(Error::Superseded))
            }
            // Refused as too late: a failed write like any other, repaired the same way.
            Ok(Put::TooLate) => {
                core.unsettled.mark(id.clone(), names, Repair::Write, l2);
                (None, Err(Error::WriteTooLate))
            }
            Err(e) => {
                bump(&core.stats.counters.l2_errors);
                core.unsettled.mark(id.clone(), names, Repair::Write, l2);
                (None, Err(e))
            }
        };
        let _ = reply.send(answer);
        keep
    }
}
