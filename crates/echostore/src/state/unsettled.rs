//! Ids whose Valkey copy may be older than what this process wrote or answered, until it is
//! repaired.
//!
//! A `put` or `invalidate` that fails has usually followed a commit at the source (the caller's
//! database moved on), so Valkey's copy of the id, and every other process's L1 copy, may now be
//! older than the source. Left alone, that copy is served for the rest of its ttl. And a process
//! that read the newer row from its loader meanwhile, with Valkey away (a degraded load, which
//! marks the id here too, as does a load whose write back failed), would go back to it once
//! Valkey answers again. So the table remembers
//! the id here and repairs it by deleting its value on Valkey, which every other process hears as
//! an invalidation push. A failed write's repair deletes the lock too, as the write itself would
//! have (a fill that read the source before it must not write back); a load's never does: after
//! a degraded load that lock, if any, is another process's, which is loading the id as the one
//! source read, and after a failed write back it may be too (this process released its own).
//! With `.version_by` a load's repair keeps a copy that shows the loaded row's version or a later
//! one: that copy is not older than the row, and deleting it would cost a source read.
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
//! Each mark is the id's own ([`IdState::unsettled`](crate::state::board::IdState), on its
//! shard's board), which a crashed owner's successor does not clear: an owner that crashes with
//! a failed write in flight does not forget it. This module marks, settles and repairs them, and
//! counts them, so that a read of a table with no failed write never looks. Each mark carries a
//! generation, so a repair that raced a newer failure of the same id does not settle it.

use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::Result;
use crate::state::board::Boards;
pub(crate) use crate::state::board::id_state::Repair;
use crate::state::board::id_state::UnsettledMark;
use crate::valkey::l2::L2;
use crate::wire::key::KeyNames;

/// How often the repair task retries while ids are unsettled.
pub(crate) const REPAIR_EVERY: Duration = Duration::from_millis(20);

/// The unsettled ids of one table: marked on their shards' boards, counted and repaired here.
pub(crate) struct Unsettled<K, V> {
    boards: Boards<K, V>,
    /// Ids marked now, changed under their boards' locks: reads of a table with no failed write
    /// never lock.
    marked: AtomicUsize,
    generation: AtomicU64,
    /// `true` while a repair task runs.
    repairing: AtomicBool,
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, V: Send + Sync + 'static> Unsettled<K, V> {
    /// The unsettled ids of the table whose boards are `boards`.
    pub(crate) fn new(boards: Boards<K, V>) -> Arc<Self> {
        Arc::new(Unsettled {
            boards,
            marked: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            repairing: AtomicBool::new(false),
        })
    }

    /// `true` if `id`'s last write failed, or its load was answered in-process, and Valkey's
    /// copy is not repaired yet.
    pub(crate) fn holds(&self, id: &K) -> bool {
        self.marked.load(Ordering::Acquire) > 0 && self.mark_of(id).is_some()
    }

    /// A write of `id` failed, or its load was answered in-process (`repair` says which):
    /// mark it, and make sure a repair task runs. A failed write's repair, pending, stays one:
    /// the lock it deletes is what keeps a fill that read before the write from writing back.
    pub(crate) fn mark(self: &Arc<Self>, id: K, names: KeyNames, repair: Repair, l2: &L2) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        self.boards.of(&id).change_or_make(id, |state| {
            let pending = state.unsettled.as_ref().map(|mark| mark.repair);
            let repair = pending.map_or(repair, |pending| pending.and(repair));
            let mark = UnsettledMark {
                generation,
                names,
                repair,
            };
            if state.unsettled.replace(mark).is_none() {
                self.marked.fetch_add(1, Ordering::AcqRel);
            }
        });
        if !self.repairing.swap(true, Ordering::AcqRel) {
            tokio::spawn(repair_task(Arc::downgrade(self), l2.clone()));
        }
    }

    /// A write of `id` landed: Valkey holds what this process last wrote.
    pub(crate) fn settle(&self, id: &K) {
        if self.marked.load(Ordering::Acquire) > 0 {
            self.settled(id, None);
        }
    }

    /// Repairs `id` now if it is unsettled; an error when the repair could not land.
    pub(crate) async fn repair(&self, id: &K, l2: &L2) -> Result<()> {
        if self.marked.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let Some(mark) = self.mark_of(id) else {
            return Ok(());
        };
        apply(&mark, l2).await?;
        self.settled(id, Some(mark.generation));
        Ok(())
    }

    fn mark_of(&self, id: &K) -> Option<UnsettledMark> {
        let board = self.boards.of(id);
        board.change(id, |state| state.unsettled.clone()).flatten()
    }

    /// Unmarks `id` if no failure marked it again since `generation` (`None`: whichever did).
    fn settled(&self, id: &K, generation: Option<u64>) {
        self.boards.of(id).change(id, |state| {
            let Some(mark) = &state.unsettled else {
                return;
            };
            if generation.is_none_or(|g| g == mark.generation) {
                state.unsettled = None;
                self.marked.fetch_sub(1, Ordering::AcqRel);
            }
        });
    }

    /// Up to `at_most` marks, to repair next (during an outage every id loaded in-process is
    /// marked, and a round that cannot land stops at its first repair).
    fn some_marks(&self, at_most: usize) -> Vec<(K, UnsettledMark)> {
        let mut marks = Vec::new();
        for board in self.boards.all() {
            let left = at_most - marks.len();
            if left == 0 {
                break;
            }
            marks.extend(board.pick(left, |(id, state)| {
                Some((id.clone(), state.unsettled.clone()?))
            }));
        }
        marks
    }

    /// Repairs up to a round's marks, stopping at the first that cannot land; `true` if a full
    /// round landed (more may be waiting).
    async fn repair_round(&self, l2: &L2) -> bool {
        let marks = self.some_marks(ROUND);
        let full = marks.len() == ROUND;
        for (id, mark) in marks {
            if apply(&mark, l2).await.is_err() {
                return false;
            }
            self.settled(&id, Some(mark.generation));
        }
        full
    }

    /// The repair task ends, unless an id was marked meanwhile (it then goes on: `true`). A mark
    /// made after `marked` was read as zero sees `repairing` false and starts a task of its own,
    /// or finds it true again and leaves the repairs to this one.
    fn may_end(&self) -> bool {
        if self.marked.load(Ordering::Acquire) > 0 {
            return false;
        }
        self.repairing.store(false, Ordering::Release);
        self.marked.load(Ordering::Acquire) == 0 || self.repairing.swap(true, Ordering::AcqRel)
    }
}

/// The repair on Valkey.
async fn apply(mark: &UnsettledMark, l2: &L2) -> Result<()> {
    let key = || String::from_utf8_lossy(&mark.names.value);
    match mark.repair {
        Repair::Write => {
            l2.invalidate(&mark.names).await?;
            tracing::debug!(key = %key(), "repair of a failed write: Valkey's copy and lock deleted");
        }
        Repair::Load { version: None } => {
            l2.delete_value(&mark.names).await?;
            tracing::debug!(key = %key(), "repair of a load answered here: Valkey's copy deleted");
        }
        Repair::Load {
            version: Some(version),
        } => match l2.drop_older(&mark.names, version).await? {
            true => {
                tracing::debug!(key = %key(), version, "repair: Valkey's copy older than the loaded version (or none): deleted")
            }
            false => {
                tracing::debug!(key = %key(), version, "repair: Valkey's copy shows the loaded version; kept")
            }
        },
    }
    Ok(())
}

/// How many marks one round takes up: a full round that lands goes on to the next at once, and
/// a round during an outage copies no more than this.
const ROUND: usize = 64;

/// Repairs every unsettled id of a table until none is left (or the table is dropped). A round
/// stops at the first repair that cannot land: Valkey is still away.
async fn repair_task<K, V>(unsettled: Weak<Unsettled<K, V>>, l2: L2)
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    loop {
        tokio::time::sleep(REPAIR_EVERY).await;
        let Some(set) = unsettled.upgrade() else {
            return;
        };
        while set.repair_round(&l2).await {}
        if set.may_end() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use embedded_valkey::EmbeddedValkey;

    use super::*;
    use crate::wire::connect::{Endpoint, Kind};

    /// A load answered in-process after a failed write of the same id keeps the write's repair,
    /// which deletes the lock too: a fill that read before the write must not write back.
    #[tokio::test]
    async fn a_pending_write_repair_is_not_weakened_by_a_load() {
        let valkey = EmbeddedValkey::start().expect("valkey");
        let endpoint = Endpoint {
            kind: Kind::Single(valkey.url()),
            ca: None,
            timeout: Duration::from_secs(5),
        };
        let l2 = L2::connect(&endpoint, Duration::from_secs(1), true, false)
            .await
            .expect("connected");
        let unsettled = Unsettled::<u64, String>::new(Boards::new(1));
        let names = crate::wire::key::key_names(None, "t", b"1").expect("names");
        // No await between the marks and the look: the repair task has not run yet.
        unsettled.mark(1, names.clone(), Repair::Write, &l2);
        unsettled.mark(1, names.clone(), Repair::Load { version: None }, &l2);
        assert_eq!(unsettled.mark_of(&1).map(|m| m.repair), Some(Repair::Write));
        unsettled.mark(2, names.clone(), Repair::Load { version: None }, &l2);
        unsettled.mark(2, names, Repair::Write, &l2);
        assert_eq!(unsettled.mark_of(&2).map(|m| m.repair), Some(Repair::Write));
    }
}
