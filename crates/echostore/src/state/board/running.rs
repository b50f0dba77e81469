//! The marks of running writes: held by each write's own task, from when the owner hands it the
//! write until it lands or fails, so that they outlive an owner that crashes meanwhile.

use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::{Board, IdState};

/// A write task's mark on its id, from when the write is handed to its task until it lands (or
/// fails); dropped with the task, whatever became of the owner that started it.
pub(crate) struct RunningWrite<K: Eq + Hash, V, W> {
    board: Arc<Board<K, V, W>>,
    id: Option<K>,
}

impl<K: Eq + Hash, V, W> Board<K, V, W> {
    /// Marks a write of `id` as running until the returned mark is dropped (by the write's task).
    pub(crate) fn running_write(self: &Arc<Self>, id: K) -> RunningWrite<K, V, W>
    where
        K: Clone,
    {
        let mut ids = self.ids();
        ids.entry(id.clone()).or_insert(IdState::NOTHING).running += 1;
        drop(ids);
        RunningWrite {
            board: Arc::clone(self),
            id: Some(id),
        }
    }

    /// The ids with a write task running (a new owner's view of the writes it did not start).
    pub(crate) fn running_writes(&self) -> Vec<K>
    where
        K: Clone,
    {
        let ids = self.ids();
        let running = ids.iter().filter(|(_, on)| on.running > 0);
        running.map(|(id, _)| id.clone()).collect()
    }

    /// Returns once no write task of `id` is running.
    pub(crate) async fn landed(&self, id: &K) {
        loop {
            let woken = self.landings.notified();
            let mut woken = std::pin::pin!(woken);
            // Registered before the check: a landing after it wakes this waiter.
            woken.as_mut().enable();
            if self.ids().get(id).is_none_or(|on| on.running == 0) {
                return;
            }
            woken.await;
        }
    }
}

impl<K: Eq + Hash, V, W> Drop for RunningWrite<K, V, W> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        // A key whose `Hash` or `Eq` panics would panic here too, maybe while the task unwinds;
        // its mark then stays, and its id is read through the owner only.
        let unmark = AssertUnwindSafe(|| {
            self.board
                .change(&id, |on| on.running = on.running.saturating_sub(1));
        });
        if std::panic::catch_unwind(unmark).is_ok() {
            self.board.landings.notify_waiters();
        }
    }
}
