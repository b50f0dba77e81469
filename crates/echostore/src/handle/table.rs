//! The typed table handle, [`Table<K, V>`]: the calls a user makes on a started table.
//!
//! A read checks L1 on the caller's own task ([`crate::handle::lookup`]); only a miss (or an expired
//! entry) becomes a message to the owner. Writes (`put`, `invalidate`) always go through the owner
//! so that they are ordered with the fills of the same id.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::{Arc, Weak};

use crate::coherence::Sink;
use crate::error::{Error, Result};
use crate::events::{EventKind, InvalidatedBy};
use crate::fetched::Fetched;
use crate::flight::l2_write::L2Write;
use crate::handle::lookup::Lookup;
use crate::handle::store::Store;
use crate::shard::owner::OwnerMsg;
use crate::shard::owner::owner_ref::OwnerRef;
use crate::shard::owner::owner_ref::invalidated;
use crate::shard::supervisor::SupervisorMsg;
use crate::state::core::TableCore;
use crate::state::l1::L1Cache;
use crate::state::stats::TableStats;
use crate::wire::key::{Key, Value};

struct TableInner<K: Key, V: Value> {
    core: Arc<TableCore<K, V>>,
    owner: Arc<OwnerRef<K, V>>,
    /// Where coherence tells this table of pushes, when it is on.
    sink: Option<Weak<dyn Sink>>,
    /// Keeps the store (its supervisor and connection) alive while the table is.
    store: Store,
}

impl<K: Key, V: Value> Drop for TableInner<K, V> {
    fn drop(&mut self) {
        // The last handle is gone: stop the owner (the supervisor does not restart a stop), and
        // stop tracking the table's keys.
        for owner in self.owner.all() {
            owner.stop(None);
        }
        if let (Some(tracker), Some(sink)) = (self.store.tracker(), &self.sink) {
            tracker.remove_table(&self.core.name, sink);
        }
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
    /// Starts the owner of `core` under the store's supervisor.
    pub(crate) async fn start(store: Store, core: TableCore<K, V>) -> Result<Self> {
        if store.tracker().is_some() && &*core.name == "lock" {
            // Its value prefix `lock:` would cover every table's lock prefix, which Valkey
            // refuses to track beside them.
            return Err(Error::InvalidConfig(
                "a table named \"lock\" needs coherence(false): its keys overlap the lock keys"
                    .into(),
            ));
        }
        let core = Arc::new(core);
        let supervisor = store.supervisor();
        let (owner, restarts) = OwnerRef::start(&core, supervisor.get_cell()).await?;
        let every: Arc<dyn crate::state::core::EveryOwner> = owner.clone();
        let _ = core.owners.set(Arc::downgrade(&every));
        let mut sink = None;
        if let Some(tracker) = store.tracker() {
            let owner: Arc<dyn Sink> = owner.clone();
            let weak = Arc::downgrade(&owner);
            let wait = store.valkey_timeout();
            tracker.add_table(&core.name, weak.clone(), wait).await;
            sink = Some(weak);
        }
        // Read once tracked, so that no mark set in between goes unheard.
        if let Some(l2) = &core.l2
            && let Err(e) = core.marks.refresh(l2, true).await
        {
            // Owed: `poll_marks` reads them in full until a read lands.
            crate::state::stats::bump(&core.stats.counters.marks_read_failures);
            tracing::warn!(table = %core.name, error = %e, "reading the table's marks failed");
        }
        if let Some(l2) = &core.l2 {
            core.schemas.join(l2, &core.name).await;
        }
        crate::shard::owner::keep_schema(&core, Arc::downgrade(&owner));
        crate::shard::owner::poll_marks(&core, Arc::downgrade(&owner));
        sweep_idle(&core);
        audit_hits(&core);
        for (shard, restart) in restarts.into_iter().enumerate() {
            let id = owner.current(shard).get_id();
            supervisor
                .cast(SupervisorMsg::Watch { owner: id, restart })
                .map_err(|_| Error::Stopped)?;
        }
        crate::state::metrics::spawn_exporter(&core);
        Ok(Table {
            inner: Arc::new(TableInner {
                core,
                owner,
                sink,
                store,
            }),
        })
    }

    /// The table's shared state and its owner, for the handle's methods defined beside their
    /// concept (`batch`, `delete`).
    pub(crate) fn parts(&self) -> (&TableCore<K, V>, &OwnerRef<K, V>) {
        (&self.inner.core, &self.inner.owner)
    }

    /// The table's name, as given to [`Store::table`].
    pub fn name(&self) -> &str {
        &self.inner.core.name
    }

    /// The Valkey names of `id`'s value and lock as this table uses them: under its store's
    /// namespace and, for a schema other than 0 (`.schema(n)`), with its schema's suffix
    /// (`#<schema>.<generation>`, which changes only when the schema's last process has gone).
    /// For tools that read what this process reads; [`crate::protocol::key_names`] gives schema
    /// 0's names without a table.
    ///
    /// # Errors
    ///
    /// [`Error::IdTooLong`] for an id that renders over [`crate::MAX_ID_BYTES`].
    pub fn key_names<Q>(&self, id: &Q) -> Result<crate::protocol::KeyNames>
    where
        K: std::borrow::Borrow<Q>,
        Q: ToOwned<Owned = K> + ?Sized,
    {
        self.inner.core.names(&id.to_owned())
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
    ///     .build()
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
    // Inline in the caller, so that a hit makes no call of ours before L1's lookup (the hit's
    // cost is how many hits' cache misses overlap, and every call between them counts).
    #[inline(always)]
    pub fn get<'a, Q>(&'a self, id: &'a Q) -> impl Future<Output = Result<Arc<V>>> + Send + 'a
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    {
        Lookup::new(&self.inner.core, &self.inner.owner, id)
    }

    /// Like [`get`](Self::get), and also says where the answer came from ([`Origin`]).
    ///
    /// [`Origin`]: crate::Origin
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Origin, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let names = store
    ///     .table::<String, String>("names")
    ///     .loader(|id: String| async move { Ok::<_, std::io::Error>(id.to_uppercase()) })
    ///     .build()
    ///     .await?;
    /// let first = names.fetch("alice").await?; // a borrowed key, as with HashMap::get
    /// assert_eq!((first.value.as_str(), first.origin), ("ALICE", Origin::Loaded));
    /// let again = names.fetch("alice").await?;
    /// assert_eq!(again.origin, Origin::L1);
    /// println!("served from {}", again.origin); // "served from l1"
    /// # Ok(())
    /// # }
    /// ```
    pub fn fetch<'a, Q>(&'a self, id: &'a Q) -> impl Future<Output = Result<Fetched<V>>> + Send + 'a
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    {
        Lookup::new(&self.inner.core, &self.inner.owner, id)
    }

    /// Writes `value` through L1 and Valkey and returns it as stored: the same `Arc` that L1
    /// now holds, so a caller can cache a value and answer with it without a clone.
    ///
    /// A fill in flight for `id` still answers its own waiters (with the put's value, once L1
    /// holds it), but its value is stored nowhere: the put wins. With a Valkey, the put succeeds once Valkey has the value; an encoding over
    /// `max_value_bytes` is refused with [`Error::TooLarge`] and writes nothing, and a put that
    /// finds a value stamped ahead of Valkey's clock changes nothing and answers
    /// [`Error::Superseded`]. A put that fails is repaired by the table: the id's Valkey copy is
    /// deleted as soon as Valkey takes it (`docs/failure-semantics.md`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::sync::Arc;
    /// use echostore::{Origin, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("user {id}")) })
    ///     .build()
    ///     .await?;
    /// let stored: Arc<String> = users.put(&42, "Alice".to_owned()).await?;
    /// let read = users.fetch(&42).await?;
    /// assert!(Arc::ptr_eq(&stored, &read.value)); // the very value L1 holds
    /// assert_eq!(read.origin, Origin::L1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn put<Q>(&self, id: &Q, value: V) -> Result<Arc<V>>
    where
        K: Borrow<Q>,
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let written = self.write(id.to_owned(), value, InvalidatedBy::Put).await?;
        Ok(written.value)
    }

    /// A put that also answers its [`Version`](crate::Version): carried to another replica (a
    /// cookie, a header), it makes that replica's read with
    /// [`ReadOptions::at_least`](crate::ReadOptions::at_least) return this value or a newer
    /// one, even before the replica hears of the write. The version is the value's own with
    /// `.version_by`, else the instant Valkey's clock stamped the write (without Valkey, this
    /// process's clock).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::sync::{Arc, Mutex};
    /// use echostore::{ReadOptions, Store, Version};
    ///
    /// let db = Arc::new(Mutex::new("Ada".to_owned())); // the source of truth
    /// let store = Store::builder().build().await?;
    /// let users = store
    ///     .table::<u64, String>("users")
    ///     .loader({
    ///         let db = Arc::clone(&db);
    ///         move |_id: u64| {
    ///             let row = db.lock().unwrap().clone();
    ///             async move { Ok::<_, std::io::Error>(row) }
    ///         }
    ///     })
    ///     .build()
    ///     .await?;
    /// *db.lock().unwrap() = "Alice".to_owned(); // the source first, then the cache
    /// let written = users.put_versioned(&42, "Alice".to_owned()).await?;
    /// let token = written.version.to_string(); // to a cookie or a header
    /// let wanted: Version = token.parse().expect("a token this table issued");
    /// let read = users.get_with(&42, ReadOptions::new().at_least(wanted)).await?;
    /// assert_eq!(*read, "Alice");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn put_versioned<Q>(&self, id: &Q, value: V) -> Result<crate::Written<V>>
    where
        K: Borrow<Q>,
        Q: ToOwned<Owned = K> + ?Sized,
    {
        self.write(id.to_owned(), value, InvalidatedBy::Put).await
    }

    /// A put's work, for `put` (`by` [`InvalidatedBy::Put`]) and `delete` (`Delete`): both order
    /// the write through the id's owner; they tell subscribers apart.
    pub(crate) async fn write(
        &self,
        id: K,
        value: V,
        by: InvalidatedBy,
    ) -> Result<crate::Written<V>> {
        let core = &self.inner.core;
        let held = core.events.heard() && core.l1.get(&id).is_some();
        let life = core.config.life(&value, core.now_ms());
        let write = match &core.l2 {
            None => None,
            Some(_) => {
                // Stamped with every mark set before this call that Valkey has told us of: one
                // set before it and not yet read would make the copy a miss everywhere else.
                core.hear_marks().await;
                let marking = core.marking(&id, &value, core.marks.stamp())?;
                Some(L2Write::Put {
                    names: core.write_names(&id).await?,
                    envelope: life.encode(&value, &core.config, &marking)?,
                    px: life.physical_ms(),
                })
            }
        };
        let source_version = core.config.version_of(&value);
        let value = Arc::new(value);
        let entry = life.entry(Arc::clone(&value));
        let stamp = self
            .inner
            .owner
            .call(&id.clone(), {
                let id = id.clone();
                move |reply| OwnerMsg::Put {
                    id,
                    entry,
                    write,
                    reply,
                }
            })
            .await;
        // The owner took the write, and with it L1's copy, unless it was stopped: a write that
        // then failed on Valkey still made the copy void.
        if !matches!(stamp, Err(Error::Stopped)) {
            match by {
                InvalidatedBy::Put if held => core.events.emit(Some(&id), invalidated(by)),
                InvalidatedBy::Put => {}
                _ => core.events.emit(Some(&id), invalidated(by)),
            }
        }
        let stamp = stamp?;
        core.events.emit_owned(id, EventKind::Written);
        let version = match source_version {
            Some(n) => crate::Version::source(n),
            None => crate::Version::written(stamp.unwrap_or_else(|| core.now_ms())),
        };
        Ok(crate::Written { value, version })
    }

    /// Drops `id` from L1 and Valkey, and drops its lock, so that a fill in flight cannot write
    /// its (older) value back. That fill still answers its own waiters; the next read loads
    /// afresh.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{Origin, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let names = store
    ///     .table::<String, String>("names")
    ///     .loader(|id: String| async move { Ok::<_, std::io::Error>(format!("{id} from the source")) })
    ///     .build()
    ///     .await?;
    /// names.put("bob", "Bob, edited".to_owned()).await?;
    /// names.invalidate("bob").await?;
    /// let read = names.fetch("bob").await?;
    /// assert_eq!((read.value.as_str(), read.origin), ("bob from the source", Origin::Loaded));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn invalidate<Q>(&self, id: &Q) -> Result<()>
    where
        K: Borrow<Q>,
        Q: ToOwned<Owned = K> + ?Sized,
    {
        self.drop_id(id.to_owned(), InvalidatedBy::Invalidate).await
    }

    /// An invalidation's work, for `invalidate` and `delete` (told apart by `by`).
    pub(crate) async fn drop_id(&self, id: K, by: InvalidatedBy) -> Result<()> {
        let core = &self.inner.core;
        let write = match &core.l2 {
            None => None,
            Some(_) => Some(L2Write::Invalidate {
                names: core.write_names(&id).await?,
            }),
        };
        let dropped = self
            .inner
            .owner
            .call(&id.clone(), {
                let id = id.clone();
                move |reply| OwnerMsg::Invalidate { id, write, reply }
            })
            .await;
        // As for a put: L1's copy went with a write that failed on Valkey too.
        if !matches!(dropped, Err(Error::Stopped)) {
            core.events.emit_owned(id, invalidated(by));
        }
        dropped.map(drop)
    }

    /// A subscription to what happens to this table's ids in this process, from now on: loads,
    /// failed loads, writes, invalidations (by a put, `invalidate`, `delete`, a push, a tag,
    /// `clear`, a flush) and L1 evictions (for room, on expiry, for idleness).
    ///
    /// The channel holds [`EVENTS_CAPACITY`](crate::EVENTS_CAPACITY) events: a subscriber that
    /// falls further behind loses the oldest, and its next `recv` says how many
    /// (`RecvError::Lagged(n)`); it never slows a read. Until the first subscription no event is
    /// made at all.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use echostore::{EventKind, Store};
    ///
    /// let store = Store::builder().build().await?;
    /// let names = store
    ///     .table::<u64, String>("names")
    ///     .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("name {id}")) })
    ///     .build()
    ///     .await?;
    /// let mut events = names.events();
    /// names.get(&7).await?;
    /// let event = events.recv().await.expect("an event");
    /// assert_eq!((event.id, event.kind), (Some(7), EventKind::Loaded));
    /// # Ok(())
    /// # }
    /// ```
    pub fn events(&self) -> tokio::sync::broadcast::Receiver<crate::Event<K>> {
        self.inner.core.events.subscribe()
    }

    /// A snapshot of the table's counters.
    pub fn stats(&self) -> TableStats {
        self.inner.core.stats_now()
    }

    /// How many ids this process holds a state of (a flight, a write, an expected push, a
    /// waiting loser, …): a test hook, which finds a state left behind once nothing of an id is
    /// in motion.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn ids_held(&self) -> usize {
        self.inner.core.boards.all().map(|b| b.ids().len()).sum()
    }
}

/// With `.l1_idle`, drops L1's idle entries every quarter of it (an entry leaves at most that
/// late) until the table is gone; hits drop the idle entries they meet meanwhile.
fn sweep_idle<K: Key, V: Value>(core: &Arc<TableCore<K, V>>) {
    let Some(idle) = core.config.l1_idle else {
        return;
    };
    let every = (idle / 4).max(std::time::Duration::from_millis(1));
    let weak = Arc::downgrade(core);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(core) = weak.upgrade() else { return };
            core.l1.sweep_idle();
        }
    });
}

/// With `.audit_sample`, compares the sampled hits with Valkey on a task of its own, until the
/// table is gone.
fn audit_hits<K: Key, V: Value>(core: &Arc<TableCore<K, V>>) {
    let Some(mut samples) = core.audit.as_ref().and_then(|a| a.samples()) else {
        return;
    };
    let weak = Arc::downgrade(core);
    tokio::spawn(async move {
        while let Some(sampled) = samples.recv().await {
            let Some(core) = weak.upgrade() else { return };
            let (Some(l2), Ok(names)) = (&core.l2, core.names(&sampled.id)) else {
                continue;
            };
            let at = crate::state::audit::Auditor {
                l2,
                max_bytes: core.config.max_value_bytes,
                counters: &core.stats.counters,
                custom: core.config.coding.custom(),
            };
            crate::state::audit::check(&at, &names, sampled).await;
        }
    });
}
