//! Where a table's handles find its owners: [`OwnerRef`], one slot per shard (`.shards(n)`), each
//! of which the supervisor points at a restarted owner after a crash. An id belongs to one shard,
//! by its hash ([`shard_of`]): calls and pushes about it reach the owner of its shard that is
//! current, and what concerns every id (a flush, a mark, a stop) reaches every shard.

use std::hash::Hash;
use std::sync::{Arc, RwLock, Weak};

use futures::future::join_all;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorRef, RpcReplyPort};

use crate::coherence::Sink;
use crate::coherence::tracking::keys::Found;
use crate::error::{Error, Result};
use crate::events::{EventKind, InvalidatedBy};
use crate::shard::owner::{Owner, OwnerArgs, OwnerMsg};
use crate::shard::supervisor::Restart;
use crate::state::core::TableCore;
use crate::state::marks::Scope;
use crate::state::stats::{Counters, bump};
use crate::valkey::envelope::Fingerprint;
use crate::wire::key::{Key, Value};
use std::sync::atomic::AtomicU64;

pub(crate) use crate::state::core::shard_of;

/// Where the handles find the current owner of one shard.
type Slot<K, V> = RwLock<ActorRef<OwnerMsg<K, V>>>;

/// Where the handles find the current owner of each shard; the supervisor swaps a slot after a
/// restart.
pub(crate) struct OwnerRef<K, V> {
    slots: Box<[Slot<K, V>]>,
    core: Arc<TableCore<K, V>>,
}

/// One event of the whole table (a flush, a mark), shared by the messages that carry it to every
/// shard: counted in its counter when the last of them is dropped, whether handled or lost with
/// an owner that died (whose successor drops all of its L1 when it starts). So the event counts
/// once however many shards the table has, and only once every live shard has done its part; then
/// what is left to do once for the whole table runs (a tag's sweep of L1, which is the table's).
pub(crate) struct EveryShard<K, V> {
    core: Arc<TableCore<K, V>>,
    counter: Option<Counter>,
    then: Option<Once>,
}

/// What an [`EveryShard`] event does once every shard has done its part.
type Once = Box<dyn FnOnce() + Send + Sync>;

/// Which of the table's counters an [`EveryShard`] event counts in.
pub(crate) type Counter = fn(&Counters) -> &AtomicU64;

impl<K, V> EveryShard<K, V> {
    /// An event of `core`'s table, to count in `counter`, then to finish with `then`.
    pub(crate) fn new(core: Arc<TableCore<K, V>>, counter: Counter, then: Once) -> Arc<Self> {
        Arc::new(EveryShard {
            core,
            counter: Some(counter),
            then: Some(then),
        })
    }

    /// An event of `core`'s table that counts in no counter.
    pub(crate) fn uncounted(core: Arc<TableCore<K, V>>) -> Arc<Self> {
        Arc::new(EveryShard {
            core,
            counter: None,
            then: None,
        })
    }
}

impl<K: Key, V: Value> EveryShard<K, V> {
    /// A mark of `scope`, counted in `marks_taken`. A tag's mark sweeps L1 once, after every
    /// shard has overtaken its flights and writes (so none of them stores what it covers):
    /// L1 is the table's, and `.tags` is asked once per entry, however many shards there are.
    pub(crate) fn mark(core: Arc<TableCore<K, V>>, scope: &Scope) -> Arc<Self> {
        let (core_then, scope) = (Arc::clone(&core), scope.clone());
        let then: Option<Once> = Some(Box::new(move || match scope {
            Scope::All => core_then
                .events
                .emit(None, invalidated(InvalidatedBy::Clear)),
            Scope::Tags(tags) => {
                core_then.drop_tagged(&tags);
                for tag in tags {
                    core_then
                        .events
                        .emit(None, invalidated(InvalidatedBy::Tag(tag)));
                }
            }
        }));
        Arc::new(EveryShard {
            core,
            counter: Some(|c| &c.marks_taken),
            then,
        })
    }

    /// A tracking connection lost (last known healthy at `since`), counted in `coherence_caps`:
    /// once every shard has overtaken its flights, L1 keeps each entry for at most the unconfirmed
    /// life from `since` (once for the table).
    pub(crate) fn cap(core: Arc<TableCore<K, V>>, since: std::time::Instant) -> Arc<Self> {
        let cap = Arc::clone(&core);
        Arc::new(EveryShard {
            core,
            counter: Some(|c| &c.coherence_caps),
            then: Some(Box::new(move || cap.cap_l1(since))),
        })
    }
}

impl<K, V> Drop for EveryShard<K, V> {
    fn drop(&mut self) {
        if let Some(then) = self.then.take() {
            then();
        }
        if let Some(counter) = self.counter {
            bump(counter(&self.core.stats.counters));
        }
    }
}

impl<K: Key, V: Value> OwnerRef<K, V> {
    /// Starts the owners of `core`'s shards under `supervisor`, each with a way to restart it
    /// after a crash.
    pub(crate) async fn start(
        core: &Arc<TableCore<K, V>>,
        supervisor: ActorCell,
    ) -> Result<(Arc<Self>, Vec<Restart>)> {
        let mut slots = Vec::with_capacity(core.shards);
        for shard in 0..core.shards {
            let args = OwnerArgs {
                core: Arc::clone(core),
                shard,
            };
            let (owner, _) = Actor::spawn_linked(None, Owner::new(), args, supervisor.clone())
                .await
                .map_err(|_| Error::Stopped)?;
            slots.push(RwLock::new(owner));
        }
        let this = Arc::new(OwnerRef {
            slots: slots.into_boxed_slice(),
            core: Arc::clone(core),
        });
        let restarts = (0..core.shards)
            .map(|shard| restarter(Arc::clone(core), Arc::downgrade(&this), shard))
            .collect();
        Ok((this, restarts))
    }

    /// The table the owners serve.
    pub(crate) fn core(&self) -> &Arc<TableCore<K, V>> {
        &self.core
    }

    /// The owner of `shard` now.
    pub(crate) fn current(&self, shard: usize) -> ActorRef<OwnerMsg<K, V>> {
        self.slots[shard % self.slots.len()]
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The shard of `id`.
    pub(crate) fn shard<Q: Hash + ?Sized>(&self, id: &Q) -> usize {
        shard_of(id, self.slots.len())
    }

    /// The owner of `id`'s shard now.
    pub(crate) fn of<Q: Hash + ?Sized>(&self, id: &Q) -> ActorRef<OwnerMsg<K, V>> {
        self.current(self.shard(id))
    }

    /// Every shard's owner now.
    pub(crate) fn all(&self) -> impl Iterator<Item = ActorRef<OwnerMsg<K, V>>> + '_ {
        (0..self.slots.len()).map(|shard| self.current(shard))
    }

    /// Calls the owner of `id`'s shard; a dead owner (or one that dies mid-call) answers
    /// [`Error::Stopped`].
    pub(crate) async fn call<Q: Hash + ?Sized, T: Send + 'static>(
        &self,
        id: &Q,
        message: impl FnOnce(RpcReplyPort<Result<T>>) -> OwnerMsg<K, V>,
    ) -> Result<T> {
        answer(self.of(id).call(message, None).await)
    }

    /// Calls every shard's owner with the message `message` makes, and waits for all of them.
    pub(crate) async fn call_all(
        &self,
        message: impl Fn(RpcReplyPort<Result<()>>) -> OwnerMsg<K, V>,
    ) -> Result<()> {
        let calls = self.all().map(|owner| {
            let message = &message;
            async move { answer(owner.call(message, None).await) }
        });
        join_all(calls).await.into_iter().collect()
    }

    /// Has every shard drop what a mark of `scope` covers (`crate::state::marks`), counted once in
    /// `marks_taken`; with `answered`, waits until every shard has.
    pub(crate) async fn marked(&self, scope: &Scope, answered: bool) -> Result<()> {
        // The closures own the caller's share: it is dropped once every message is sent (and,
        // with `answered`, every shard has answered), so the count waits for the shards alone.
        let counted = EveryShard::mark(Arc::clone(&self.core), scope);
        let marked = move |reply| OwnerMsg::Marked {
            scope: scope.clone(),
            reply,
            counted: Arc::clone(&counted),
        };
        if !answered {
            self.cast_all(move || marked(None));
            return Ok(());
        }
        self.call_all(move |reply| marked(Some(reply))).await
    }

    /// Casts the message `message` makes to every shard's owner.
    pub(crate) fn cast_all(&self, message: impl Fn() -> OwnerMsg<K, V>) {
        for owner in self.all() {
            let _ = owner.cast(message());
        }
    }
}

/// An `Invalidated` event's kind.
pub(crate) fn invalidated(by: InvalidatedBy) -> EventKind {
    EventKind::Invalidated { by }
}

fn answer<T>(outcome: std::result::Result<CallResult<Result<T>>, impl Sized>) -> Result<T> {
    match outcome {
        Ok(CallResult::Success(answer)) => answer,
        _ => Err(Error::Stopped),
    }
}

/// `route` with a panic in it taken as `None`: it runs the key type's own code (`from_rendered`,
/// `Hash`, `render`) on bytes anyone may have written under the table's prefix, on the tracking
/// task, which must outlive them to keep every table coherent.
fn routed<T>(route: impl FnOnce() -> Option<T>) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(route))
        .ok()
        .flatten()
}

impl<K: Key, V: Value> Sink for OwnerRef<K, V> {
    fn owns(&self, schema: &[u8]) -> bool {
        self.core.schemas.is_own(schema)
    }

    fn invalidated(&self, id: &[u8]) {
        let routed = routed(|| {
            let id = K::from_rendered(id)?;
            let _ = self
                .of(&id)
                .cast(OwnerMsg::Invalidated { id, checked: false });
            Some(())
        });
        // An id this key type cannot parse back: every shard drops all of L1.
        if routed.is_none() {
            self.flush(false);
        }
    }

    fn flush(&self, when_held: bool) {
        // A tracking connection's subscription of a table that holds nothing drops nothing.
        let flushed = if !when_held || self.core.holds_anything() {
            let core = Arc::clone(&self.core);
            let then = move || core.events.emit(None, invalidated(InvalidatedBy::Flush));
            EveryShard::new(
                Arc::clone(&self.core),
                |c| &c.coherence_flushes,
                Box::new(then),
            )
        } else {
            EveryShard::uncounted(Arc::clone(&self.core))
        };
        self.cast_all(|| OwnerMsg::Flush(Arc::clone(&flushed)));
    }

    fn cap(&self, since: std::time::Instant) {
        let capped = EveryShard::cap(Arc::clone(&self.core), since);
        self.cast_all(|| OwnerMsg::Cap(Arc::clone(&capped)));
    }

    fn marks_changed(&self) {
        self.core.marks.pushed();
        // What a new mark covers reaches every shard (`read_marks`).
        super::marked::read_marks(&self.core, self.current(0), false);
    }

    fn confirmed(&self, id: &[u8], fingerprint: Fingerprint, found: Found) {
        // An id this key type cannot parse back is found among those waiting. One not found
        // leaves its value unconfirmed: not fresh, never wrong.
        routed(|| {
            let id = routed(|| K::from_rendered(id))
                .or_else(|| self.core.boards.awaiting(id, fingerprint))?;
            let _ = self.of(&id).cast(OwnerMsg::Confirmed {
                id,
                fingerprint,
                found,
            });
            Some(())
        });
    }

    fn pushed(&self, id: &[u8]) {
        let routed = routed(|| {
            let id = K::from_rendered(id)?;
            self.core.board(&id).wake_losers(&id);
            Some(())
        });
        if routed.is_none() {
            self.wake_losers();
        }
    }

    fn wake_losers(&self) {
        for board in self.core.boards.all() {
            board.wake_all_losers();
        }
    }

    fn caught_up(&self) -> futures::future::BoxFuture<'_, ()> {
        // A stopped owner lost what was on its way to it; its successor starts from nothing.
        Box::pin(async move { _ = self.call_all(OwnerMsg::CaughtUp).await })
    }
}

/// How the supervisor replaces the owner of `shard` after a crash.
fn restarter<K: Key, V: Value>(
    core: Arc<TableCore<K, V>>,
    owner: Weak<OwnerRef<K, V>>,
    shard: usize,
) -> Restart {
    Box::new(move |supervisor: ActorCell| {
        let core = Arc::clone(&core);
        let owner = owner.clone();
        Box::pin(async move {
            let owner = owner.upgrade()?; // every handle is gone: nothing to restart for
            let args = OwnerArgs {
                core: Arc::clone(&core),
                shard,
            };
            let (fresh, _) = Actor::spawn_linked(None, Owner::new(), args, supervisor)
                .await
                .ok()?;
            // Handles point at the new owner before the restart is counted.
            *owner.slots[shard]
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

impl<K: Key, V: Value> crate::state::core::EveryOwner for OwnerRef<K, V> {
    fn marked(&self, scope: Scope) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ = OwnerRef::marked(self, &scope, false).await;
        })
    }
}
