//! A `put` or `invalidate` waiting for its turn in its id's queue: what it writes to Valkey
//! ([`L2Write`]), the L1 entry it leaves once it lands, and its caller. The id's per-id state
//! ([`crate::state::board`]) queues these; the write itself is `crate::flight::l2_write`.

use ractor::RpcReplyPort;

use crate::error::Result;
use crate::state::l1::Entry;
use crate::valkey::envelope::{self, Fingerprint};
use crate::wire::key::KeyNames;

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
}
