//! Ids whose Valkey copy may be older than what this process wrote or answered, until it is
//! repaired.
//!
//! A `put` or `invalidate` that fails has usually followed a commit at the source (the caller's
//! database moved on), so Valkey's copy of the id, and every other process's L1 copy, may now be
//! older than the source. Left alone, that copy is served for the rest of its ttl. And a process
//! that read the newer row from its loader meanwhile, with Valkey away (a degraded load, which
//! marks the id here too), would go back to it once Valkey answers again. So the table remembers
//! the id here and repairs it by deleting its value on Valkey, which every other process hears as
//! an invalidation push. A failed write's repair deletes the lock too, as the write itself would
//! have (a fill that read the source before it must not write back); a degraded load's never
//! does: that lock, if any, is another process's, which is loading the id as the one source read.
//!
//! - a repair task retries every [`REPAIR_EVERY`] while any id is unsettled, through the circuit
//!   breaker like any call (so a dead Valkey still costs one connection attempt per cooldown: a
//!   repair lands at the latest one cooldown after Valkey is back);
//! - a read of an unsettled id in this process repairs it before it trusts Valkey's copy, and
//!   loads in-process while the repair cannot land;
//! - a later write of the id that succeeds settles it (Valkey holds that write now).
//!
//! A repair of an id Valkey no longer holds (it restarted empty) pushes nothing, and needs not:
//! a restart drops every tracking connection, and every process flushes its L1 for it.
//!
//! The set lives in the table's shared core, not in the owner: an owner that crashes with a
//! failed write in flight does not forget it. Each mark carries a generation, so a repair that
//! raced a newer failure of the same id does not settle it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::error::Result;
use crate::valkey::l2::L2;
use crate::wire::key::KeyNames;

/// How often the repair task retries while ids are unsettled.
pub(crate) const REPAIR_EVERY: Duration = Duration::from_millis(20);

/// The unsettled ids of one table.
pub(crate) struct Unsettled<K> {
    ids: Mutex<HashMap<K, Mark>>,
    /// `true` while `ids` may be non-empty: reads of a table with no failed write never lock.
    any: AtomicBool,
    generation: AtomicU64,
    /// `true` while a repair task runs.
    repairing: AtomicBool,
}

/// One unsettled id: which failure marked it, its keys, and what its repair deletes.
#[derive(Clone)]
struct Mark {
    generation: u64,
    names: KeyNames,
    repair: Repair,
}

/// What made an id unsettled, which says what its repair deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repair {
    /// A `put` or `invalidate` that failed: the value and the lock, as the write would have.
    Write,
    /// A load answered in-process while Valkey could not be read: the value only.
    Load,
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static> Unsettled<K> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Unsettled {
            ids: Mutex::new(HashMap::new()),
            any: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            repairing: AtomicBool::new(false),
        })
    }

    /// `true` if `id`'s last write failed and is not repaired yet.
    pub(crate) fn holds(&self, id: &K) -> bool {
        self.any.load(Ordering::Acquire) && self.lock().contains_key(id)
    }

    /// A write of `id` failed, or its load was answered in-process (`repair` says which):
    /// remember it, and make sure a repair task runs.
    pub(crate) fn mark(self: &Arc<Self>, id: K, names: KeyNames, repair: Repair, l2: &L2) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mark = Mark {
            generation,
            names,
            repair,
        };
        self.lock().insert(id, mark);
        self.any.store(true, Ordering::Release);
        if !self.repairing.swap(true, Ordering::AcqRel) {
            tokio::spawn(repair_task(Arc::downgrade(self), l2.clone()));
        }
    }

    /// A write of `id` landed: Valkey holds what this process last wrote.
    pub(crate) fn settle(&self, id: &K) {
        if self.any.load(Ordering::Acquire) {
            self.lock().remove(id);
        }
    }

    /// Repairs `id` now if it is unsettled; an error when the repair could not land.
    pub(crate) async fn repair(&self, id: &K, l2: &L2) -> Result<()> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let Some(mark) = self.lock().get(id).cloned() else {
            return Ok(());
        };
        mark.apply(l2).await?;
        self.settled(id, mark.generation);
        Ok(())
    }

    /// Removes `id` if no failure marked it again since `generation`.
    fn settled(&self, id: &K, generation: u64) {
        let mut ids = self.lock();
        if ids.get(id).is_some_and(|m| m.generation == generation) {
            ids.remove(id);
        }
    }

    /// Some mark, to repair next (one at a time: during an outage the set holds every id
    /// loaded in-process, and a round that cannot land stops at its first repair).
    fn any_mark(&self) -> Option<(K, Mark)> {
        self.lock()
            .iter()
            .next()
            .map(|(id, mark)| (id.clone(), mark.clone()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Mark>> {
        // A panic while holding the lock leaves the map itself intact: keep using it.
        self.ids
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Mark {
    /// The repair on Valkey.
    async fn apply(&self, l2: &L2) -> Result<()> {
        match self.repair {
            Repair::Write => l2.invalidate(&self.names).await,
            Repair::Load => l2.delete_value(&self.names).await,
        }
    }
}

/// Repairs every unsettled id of a table until none is left (or the table is dropped). A round
/// stops at the first repair that cannot land: Valkey is still away.
async fn repair_task<K: Clone + Eq + Hash + Send + Sync + 'static>(
    unsettled: Weak<Unsettled<K>>,
    l2: L2,
) {
    loop {
        tokio::time::sleep(REPAIR_EVERY).await;
        let Some(set) = unsettled.upgrade() else {
            return;
        };
        // At most as many repairs as there are marks now: a mark made again meanwhile waits for
        // the next round.
        let marks = set.lock().len();
        for _ in 0..marks {
            let Some((id, mark)) = set.any_mark() else {
                break;
            };
            if mark.apply(&l2).await.is_err() {
                break;
            }
            set.settled(&id, mark.generation);
        }
        let ids = set.lock();
        if ids.is_empty() {
            set.any.store(false, Ordering::Release);
            // Under the lock: a mark after this sees `repairing` false and starts a new task.
            set.repairing.store(false, Ordering::Release);
            return;
        }
        drop(ids);
    }
}
