//! The board: the flights a miss may join without a message to the owner.
//!
//! The owner admits every flight ([`crate::flights`]); the board is where it publishes them. It
//! lists, per id, the **current** flight's [`Cell`], and nothing else: the flights map publishes
//! a flight in the step that makes it current and withdraws it in the step that ends that (it
//! lands, or a write, a push or a flush overtakes it), both on the owner's task. A miss that finds
//! its id here joins that flight on its own task — counted `coalesced`, it waits on the cell for
//! the one answer — so a herd of misses costs the owner one message, not one per caller.
//!
//! Joining through the board is the same as joining through the owner's mailbox, only earlier:
//! the caller joins the flight that was current when it looked, which is the flight its message
//! would have joined had the owner read it at that instant. A `put` that has returned has already
//! withdrawn the flight it overtook, so a read made after it never joins a flight that reads what
//! the put replaced.
//!
//! A cell is answered once. A flight that answers early (its soft timeout's stale copy) answers
//! its cell and publishes a fresh one for later joiners; a flight that changed nothing (an early
//! refresh that lost the lock) answers "fly again", and its joiners miss once more through the
//! owner; an owner that dies drops its cells' [`Answerer`]s, which answer [`Error::Stopped`].

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::fetched::Fetched;

/// What a joiner receives: the flight's answer as a joiner sees it, or `None` to fly again.
pub(crate) type Joined<V> = Option<Result<Fetched<V>>>;

/// The current flights of one table, by id.
pub(crate) struct Board<K, V> {
    cells: Mutex<HashMap<K, Arc<Cell<V>>>>,
}

/// One flight's answer for the callers who joined it through the board.
pub(crate) struct Cell<V> {
    answer: OnceLock<Joined<V>>,
    woken: Notify,
    /// Callers who joined through the board.
    joined: AtomicUsize,
}

/// The owner's end of a cell: answers it [`Error::Stopped`] if dropped unanswered (the owner
/// died with the flight).
pub(crate) struct Answerer<V>(Arc<Cell<V>>);

impl<K: Eq + Hash, V> Board<K, V> {
    pub(crate) fn new() -> Self {
        Board {
            cells: Mutex::new(HashMap::new()),
        }
    }

    fn cells(&self) -> MutexGuard<'_, HashMap<K, Arc<Cell<V>>>> {
        self.cells.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins the current flight of `id`, if the board lists one.
    ///
    /// A key whose `Hash` or `Eq` panics joins nothing here: the miss goes to the owner, whose
    /// flights map meets the same panic, crashes, answers its callers [`Error::Stopped`] and is
    /// restarted, as for any miss (the panic does not unwind into the caller's task).
    pub(crate) fn join<Q>(&self, id: &Q) -> Option<Arc<Cell<V>>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let join = || {
            let cells = self.cells();
            let cell = cells.get(id)?;
            cell.joined.fetch_add(1, Relaxed);
            Some(Arc::clone(cell))
        };
        // The map is only read here: a panic leaves it as it was.
        std::panic::catch_unwind(AssertUnwindSafe(join)).unwrap_or(None)
    }

    /// Lists `answerer`'s cell as the current flight of `id`.
    pub(crate) fn publish(&self, id: K, answerer: &Answerer<V>) {
        self.cells().insert(id, Arc::clone(&answerer.0));
    }

    /// Withdraws `answerer`'s cell from `id`, if it is the one listed.
    pub(crate) fn withdraw(&self, id: &K, answerer: &Answerer<V>) {
        let mut cells = self.cells();
        if cells.get(id).is_some_and(|c| Arc::ptr_eq(c, &answerer.0)) {
            cells.remove(id);
        }
    }

    /// Withdraws every cell (a new owner starts with no flights).
    pub(crate) fn clear(&self) {
        self.cells().clear();
    }

    /// Ids listed now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.cells().len()
    }
}

impl<V> Cell<V> {
    /// The answer, once the flight gives it.
    pub(crate) async fn wait(&self) -> Joined<V> {
        loop {
            let woken = self.woken.notified();
            let mut woken = std::pin::pin!(woken);
            // Registered before the check: an answer set after it wakes this waiter.
            woken.as_mut().enable();
            if let Some(answer) = self.answer.get() {
                return answer.clone();
            }
            woken.await;
        }
    }
}

impl<V> Answerer<V> {
    /// A fresh, unanswered cell.
    pub(crate) fn new() -> Self {
        Answerer(Arc::new(Cell {
            answer: OnceLock::new(),
            woken: Notify::new(),
            joined: AtomicUsize::new(0),
        }))
    }

    /// Callers who joined through the board so far.
    pub(crate) fn joined(&self) -> usize {
        self.0.joined.load(Relaxed)
    }

    /// Answers every caller who joined (the first answer stands), and wakes them.
    pub(crate) fn answer(&self, joined: Joined<V>) {
        if self.0.answer.set(joined).is_ok() {
            self.0.woken.notify_waiters();
        }
    }
}

impl<V> Drop for Answerer<V> {
    fn drop(&mut self) {
        if self.0.answer.get().is_none() {
            self.answer(Some(Err(Error::Stopped)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fetched::Origin;

    /// Joiners waiting before and after the answer all get it; the withdrawn id is not joined.
    #[tokio::test]
    async fn joiners_get_the_one_answer() {
        let board = Board::<u64, u64>::new();
        let answerer = Answerer::new();
        assert!(board.join(&1).is_none());
        board.publish(1, &answerer);
        let early = board.join(&1).expect("published");
        let waiting = tokio::spawn(async move { early.wait().await });
        let value = Arc::new(7);
        answerer.answer(Some(Ok(Fetched::new(Arc::clone(&value), Origin::Coalesced))));
        let late = board.join(&1).expect("still published");
        for answer in [waiting.await.expect("task"), late.wait().await] {
            let fetched = answer.expect("an answer").expect("ok");
            assert!(Arc::ptr_eq(&fetched.value, &value));
        }
        assert_eq!(answerer.joined(), 2);
        board.withdraw(&1, &answerer);
        assert!(board.join(&1).is_none());
        assert_eq!(board.len(), 0);
    }

    /// Withdrawing an older cell leaves the newer one listed.
    #[test]
    fn withdraw_removes_only_its_own_cell() {
        let board = Board::<u64, u64>::new();
        let (old, new) = (Answerer::new(), Answerer::new());
        board.publish(1, &old);
        board.publish(1, &new);
        board.withdraw(&1, &old);
        assert_eq!(board.len(), 1);
        board.withdraw(&1, &new);
        assert_eq!(board.len(), 0);
    }

    /// A cell whose owner went away unanswered answers `Stopped`.
    #[tokio::test]
    async fn a_dropped_answerer_answers_stopped() {
        let board = Board::<u64, u64>::new();
        let answerer = Answerer::new();
        board.publish(1, &answerer);
        let cell = board.join(&1).expect("published");
        drop(answerer);
        assert!(matches!(cell.wait().await, Some(Err(Error::Stopped))));
    }
}
