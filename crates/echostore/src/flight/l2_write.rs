//! A `put` or `invalidate` on its way to Valkey: what it writes ([`L2Write`]), what it leaves in L1
//! once it lands, and the write itself (the versioned put script, or the `DEL` of value and lock).

use ractor::RpcReplyPort;

use crate::error::{Error, Result};
use crate::state::core::TableCore;
use crate::state::l1::Entry;
use crate::state::stats::bump;
use crate::state::unsettled::Repair;
use crate::valkey::envelope::{self, Fingerprint};
use crate::valkey::lock::{self, Put};
use crate::wire::key::{Key, KeyNames};

/// What a landed write answers its caller: Valkey's clock when a put was stored (unix ms), none
/// for an invalidation or without Valkey.
pub(crate) type Stamp = Option<u64>;

/// A write to Valkey that a `put` or `invalidate` asked for.
pub(crate) enum L2Write {
    /// Set the value (envelope, physical life in ms) unless Valkey holds a newer one; drop the lock.
    Put {
        names: KeyNames,
        envelope: Vec<u8>,
        px: u64,
    },
    /// Delete the value and the lock.
    Invalidate { names: KeyNames },
}

/// A write waiting for its turn, with the L1 entry it leaves once it lands and its caller.
pub(crate) struct PendingWrite<V> {
    pub(crate) write: L2Write,
    pub(crate) entry: Option<Entry<V>>,
    pub(crate) reply: RpcReplyPort<Result<Stamp>>,
}

impl<V> PendingWrite<V> {
    /// The fingerprint of the envelope a put writes (its own coherence push names only the key).
    pub(crate) fn fingerprint(&self) -> Option<Fingerprint> {
        match &self.write {
            L2Write::Put { envelope, .. } => Some(envelope::fingerprint(envelope)),
            L2Write::Invalidate { .. } => None,
        }
    }

    /// Writes to Valkey and answers the caller; returns the entry L1 may keep (none when the
    /// write failed or a newer value was already stored).
    ///
    /// A write that fails marks the id unsettled ([`crate::state::unsettled`]) before its caller hears
    /// of it, so the id's Valkey copy is repaired and no read here trusts it meanwhile; one that
    /// lands settles it.
    pub(crate) async fn apply<K: Key>(self, core: &TableCore<K, V>, id: &K) -> Option<Entry<V>> {
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
                core.unsettled.mark(id.clone(), names, Repair::Write, l2);
                (None, Err(e))
            }
        };
        let _ = reply.send(answer);
        keep
    }
}
