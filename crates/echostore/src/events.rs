//! A table's events ([`Table::events`](crate::Table::events)): what happened to its ids in this
//! process — loads, failed loads, writes, invalidations and L1 evictions — on a bounded
//! broadcast channel.
//!
//! Nothing is sent until the first subscriber asks, so a table nobody listens to pays one relaxed
//! load where an event would be made (never on an L1 hit). A subscriber that falls behind the
//! channel's capacity loses the oldest events: its next `recv` answers
//! `RecvError::Lagged(n)` with how many, and reads on; a slow subscriber never slows a read.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use tokio::sync::broadcast;

/// Events a subscriber may fall behind by before it loses the oldest.
pub const EVENTS_CAPACITY: usize = 4096;

/// One thing that happened to a table's id (or to the whole table: `id` is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event<K> {
    /// The id, or `None` for what covers many (a tag, a clear, a flush).
    pub id: Option<K>,
    /// What happened.
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// This process read the id from the source (the loader or a batch loader call).
    Loaded,
    /// This process's source read of the id failed (an error, a panic or a timeout).
    LoadFailed,
    /// This process wrote a value of the id (`put`, or `delete` writing `None`), and Valkey took it.
    Written,
    /// This process's L1 copies were made void (by a `put`, `invalidate` or `delete` whether or
    /// not Valkey then took the write: the copy went when the write was taken).
    Invalidated {
        /// By what.
        by: InvalidatedBy,
    },
    /// An L1 entry left for room or age.
    Evicted {
        /// Why.
        cause: EvictionCause,
    },
}

/// What made copies void.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidatedBy {
    /// A `put` in this process replaced the id's copy (the `Written` event follows it).
    Put,
    /// `invalidate` in this process.
    Invalidate,
    /// `delete` in this process.
    Delete,
    /// Valkey's push: another process (or a script, or an expiry on Valkey) changed the id.
    Push,
    /// `invalidate_tag` of this tag, in this or another process.
    Tag(String),
    /// `clear`, in this or another process.
    Clear,
    /// L1 flushed: coherence was lost and regained, or the database was flushed.
    Flush,
}

/// Why an L1 entry left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvictionCause {
    /// L1 was full (`l1_capacity`, or `l1_capacity_bytes`).
    Size,
    /// A read found it past its freshness (the read loads it again).
    Expired,
    /// Unread for the table's `l1_idle`.
    Idle,
}

/// The table's sending side.
pub(crate) struct Events<K> {
    sender: broadcast::Sender<Event<K>>,
    /// Set by the first subscriber and never cleared: until then, nothing is made or sent.
    heard: AtomicBool,
}

impl<K: Clone> Events<K> {
    pub(crate) fn new() -> Self {
        Events {
            sender: broadcast::Sender::new(EVENTS_CAPACITY),
            heard: AtomicBool::new(false),
        }
    }

    /// A new subscriber, receiving every event from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event<K>> {
        let receiver = self.sender.subscribe();
        self.heard.store(true, Relaxed);
        receiver
    }

    /// `true` once anyone subscribed: whether an event is worth making.
    #[inline]
    pub(crate) fn heard(&self) -> bool {
        self.heard.load(Relaxed)
    }

    /// Sends `kind` for `id` (cloned only when someone listens).
    #[inline]
    pub(crate) fn emit(&self, id: Option<&K>, kind: EventKind) {
        if self.heard() {
            // No receiver left is not an error: the event has no one to reach.
            let _ = self.sender.send(Event {
                id: id.cloned(),
                kind,
            });
        }
    }

    /// Sends `kind` for an id already owned.
    pub(crate) fn emit_owned(&self, id: K, kind: EventKind) {
        if self.heard() {
            let _ = self.sender.send(Event { id: Some(id), kind });
        }
    }
}

/// quick_cache's lifecycle hook: an entry evicted for room is an `Evicted { Size }` event.
pub(crate) struct Evictions<K>(pub(crate) std::sync::Arc<Events<K>>);

impl<K> Clone for Evictions<K> {
    fn clone(&self) -> Self {
        Evictions(std::sync::Arc::clone(&self.0))
    }
}

impl<K: Clone, Val> quick_cache::Lifecycle<K, Val> for Evictions<K> {
    type RequestState = ();

    fn begin_request(&self) -> Self::RequestState {}

    fn on_evict(&self, _state: &mut (), key: K, _val: Val) {
        self.0.emit_owned(
            key,
            EventKind::Evicted {
                cause: EvictionCause::Size,
            },
        );
    }
}
