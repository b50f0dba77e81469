//! The typed table handle, [`Table<K, V>`], and the parts it shares with its owner.
//!
//! A read checks L1 on the caller's own task; only a miss (or an expired entry) becomes a message
//! to the owner. Writes (`put`, `invalidate`) always go through the owner so that they are ordered
//! with the fills of the same id.

use std::sync::{Arc, RwLock, Weak};

use futures::FutureExt;
use futures::future::BoxFuture;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorRef, RpcReplyPort};

use crate::config::{Loader, TableConfig};
use crate::envelope::{self, unix_ms};
use crate::error::{Error, Result};
use crate::fetched::{Fetched, Origin};
use crate::key::{Key, KeyNames, Value};
use crate::l1::{L1, L1Backend, L1Cache};
use crate::l2::L2;
use crate::lookup::Lookup;
use crate::owner::{L2Write, Owner, OwnerMsg};
use crate::stats::{Stats, TableStats, bump};
use crate::store::Store;
use crate::supervisor::{Restart, SupervisorMsg};

/// What a table's handles and its owner share.
pub(crate) struct TableCore<K, V> {
    pub(crate) name: Arc<str>,
    pub(crate) config: TableConfig<V>,
    pub(crate) l1: L1<K, V>,
    pub(crate) l2: Option<L2>,
    pub(crate) loader: Loader<K, V>,
    pub(crate) stats: Stats,
}

/// Where the handles find the current owner; the supervisor swaps it after a restart.
type OwnerSlot<K, V> = RwLock<ActorRef<OwnerMsg<K, V>>>;

struct TableInner<K: Key, V: Value> {
    core: Arc<TableCore<K, V>>,
    owner: Arc<OwnerSlot<K, V>>,
    /// Keeps the store (its supervisor and connection) alive while the table is.
    _store: Store,
}

impl<K: Key, V: Value> Drop for TableInner<K, V> {
    fn drop(&mut self) {
        // The last handle is gone: stop the owner (the supervisor does not restart a stop).
        current(&self.owner).stop(None);
    }
}

/// A started cache table: `get`, `fetch`, `put`, `invalidate`, `stats`.
///
/// `Table` is `Clone` and cheap to clone (an `Arc`): hand a clone to every task. The table's owner
/// stops when the last clone is dropped.
pub struct Table<K: Key, V: Value> {
    inner: Arc<TableInner<K, V>>,
}

impl<K: Key, V: Value> Clone for Table<K, V> {
    fn clone(&self) -> Self {
        Table {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K: Key, V: Value> std::fmt::Debug for Table<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("name", &self.inner.core.name)
            .finish_non_exhaustive()
    }
}

impl<K: Key, V: Value> Table<K, V> {
    pub(crate) async fn start(
        store: Store,
        name: &str,
        config: TableConfig<V>,
        backend: L1Backend,
        capacity: usize,
        loader: Loader<K, V>,
    ) -> Result<Self> {
        let core = Arc::new(TableCore {
            name: Arc::from(name),
            config,
            l1: L1::new(backend, capacity),
            l2: store.l2().cloned(),
            loader,
            stats: Stats::new(),
        });
        let supervisor = store.supervisor();
        let (owner, _) =
            Actor::spawn_linked(None, Owner::new(), Arc::clone(&core), supervisor.get_cell())
                .await
                .map_err(|_| Error::Stopped)?;
        let slot = Arc::new(RwLock::new(owner.clone()));
        let restart = restarter(Arc::clone(&core), Arc::downgrade(&slot));
        supervisor
            .cast(SupervisorMsg::Watch {
                owner: owner.get_id(),
                restart,
            })
            .map_err(|_| Error::Stopped)?;
        Ok(Table {
            inner: Arc::new(TableInner {
                core,
                owner: slot,
                _store: store,
            }),
        })
    }

    /// The table's name, as given to [`Store::table`].
    pub fn name(&self) -> &str {
        &self.inner.core.name
    }

    /// The value for `id`: from L1, else from the one flight for `id` (Valkey, the lock, the
    /// loader).
    ///
    /// Concurrent calls on one id share one flight: the first miss starts it, the others join it
    /// (counted as `coalesced`), and every caller receives the same `Arc` — or the same error.
    /// Dropping the future does not cancel the flight for the others.
    ///
    /// L1 is read when `get` is called, on the caller's task; a hit's future is ready at once. A
    /// miss reaches the owner when the future is first polled. So a future kept and awaited
    /// later answers with L1 as it was at the call: a `put`, `invalidate` or expiry in between is
    /// not seen by it, and the hit is counted even if the future is never awaited. (Reading L1
    /// up front keeps the hit path a plain function call: see `docs/architecture.md`, "The hit
    /// path".)
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::sync::atomic::{AtomicUsize, Ordering};
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::Store;
    ///
    /// let reads = Arc::new(AtomicUsize::new(0));
    /// let counter = Arc::clone(&reads);
    /// let store = Store::builder().build().await?;
    /// let squares = store
    ///     .table::<u64, u64>("squares")
    ///     .loader(move |id: u64| {
    ///         let counter = Arc::clone(&counter);
    ///         async move {
    ///             counter.fetch_add(1, Ordering::SeqCst);
    ///             tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    ///             Ok::<_, std::io::Error>(id * id)
    ///         }
    ///     })
    ///     .start()
    ///     .await?;
    ///
    /// // A hundred concurrent misses on one id: one load, one shared answer.
    /// let gets = (0..100).map(|_| {
    ///     let squares = squares.clone();
    ///     tokio::spawn(async move { squares.get(&12).await })
    /// });
    /// for answer in futures::future::join_all(gets).await {
    ///     assert_eq!(*answer.expect("task")?, 144);
    /// }
    /// assert_eq!(reads.load(Ordering::SeqCst), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn get<'a>(&'a self, id: &'a K) -> impl Future<Output = Result<Arc<V>>> + Send + 'a {
        Lookup::new(self, id)
    }

    /// Like [`get`](Self::get), and also says where the answer came from ([`Origin`]).
    pub fn fetch<'a>(&'a self, id: &'a K) -> impl Future<Output = Result<Fetched<V>>> + Send + 'a {
        Lookup::new(self, id)
    }

    /// The L1 hit path, on the caller's task: a fresh entry for `id`, counted, or `None`.
    #[inline]
    pub(crate) fn hit(&self, id: &K) -> Option<Fetched<V>> {
        let core = &self.inner.core;
        let entry = core.l1.get(id)?;
        if !entry.is_fresh() {
            return None;
        }
        core.stats.l1_hits.incr();
        Some(Fetched::new(entry.value, Origin::L1))
    }

    /// The miss path: a call to the owner, which joins or starts the flight for `id`.
    pub(crate) fn miss<'a>(&'a self, id: &'a K) -> BoxFuture<'a, Result<Fetched<V>>> {
        let id = id.clone();
        self.call(move |reply| OwnerMsg::Fill { id, reply }).boxed()
    }

    /// Writes `value` through L1 and Valkey. A fill in flight for `id` still answers its own
    /// waiters, but its value is stored nowhere: the put wins.
    pub async fn put(&self, id: &K, value: V) -> Result<()> {
        let core = &self.inner.core;
        let life = core.config.life();
        let value = Arc::new(value);
        let write = match &core.l2 {
            None => None,
            Some(_) => {
                let names = KeyNames::new(&core.name, id)?;
                let now_ms = unix_ms();
                let fresh_until_ms = now_ms + life.fresh_for.as_millis() as u64;
                let envelope =
                    envelope::encode(&*value, fresh_until_ms, now_ms, core.config.max_value_bytes)?;
                Some(L2Write::Put {
                    names,
                    envelope,
                    px: life.physical_ms(),
                })
            }
        };
        let entry = life.entry(value);
        let id = id.clone();
        self.call(move |reply| OwnerMsg::Put {
            id,
            entry,
            write,
            reply,
        })
        .await
    }

    /// Drops `id` from L1 and Valkey, and drops its lock, so that a fill in flight cannot write
    /// its (older) value back. That fill still answers its own waiters.
    pub async fn invalidate(&self, id: &K) -> Result<()> {
        let core = &self.inner.core;
        let write = match &core.l2 {
            None => None,
            Some(_) => Some(L2Write::Invalidate {
                names: KeyNames::new(&core.name, id)?,
            }),
        };
        let id = id.clone();
        self.call(move |reply| OwnerMsg::Invalidate { id, write, reply })
            .await
    }

    /// A snapshot of the table's counters.
    pub fn stats(&self) -> TableStats {
        let core = &self.inner.core;
        core.stats.snapshot(core.l1.len())
    }

    /// Calls the owner; a dead owner (or one that dies mid-call) answers [`Error::Stopped`].
    async fn call<T: Send + 'static>(
        &self,
        message: impl FnOnce(RpcReplyPort<Result<T>>) -> OwnerMsg<K, V>,
    ) -> Result<T> {
        let owner = current(&self.inner.owner);
        match owner.call(message, None).await {
            Ok(CallResult::Success(answer)) => answer,
            _ => Err(Error::Stopped),
        }
    }
}

fn current<K, V>(slot: &OwnerSlot<K, V>) -> ActorRef<OwnerMsg<K, V>> {
    slot.read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

/// How the supervisor replaces this table's owner after a crash.
fn restarter<K: Key, V: Value>(core: Arc<TableCore<K, V>>, slot: Weak<OwnerSlot<K, V>>) -> Restart {
    Box::new(move |supervisor: ActorCell| {
        let core = Arc::clone(&core);
        let slot = slot.clone();
        Box::pin(async move {
            let slot = slot.upgrade()?; // every handle is gone: nothing to restart for
            let (owner, _) = Actor::spawn_linked(None, Owner::new(), Arc::clone(&core), supervisor)
                .await
                .ok()?;
            // Handles point at the new owner before the restart is counted.
            *slot
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = owner.clone();
            bump(&core.stats.counters.owner_restarts);
            Some(owner.get_cell())
        })
    })
}
