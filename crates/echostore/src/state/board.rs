//! The board: the flights a miss may join without a message to the owner, and the L2 reads
//! that misses make on their own tasks; one per shard ([`Boards`]), changed by that shard's owner.
//! What it knows of one id is one entry (`OnBoard`: what is listed, and whether a write or an
//! overtaken flight of the id is in motion), kept only while some of it holds, so a miss decides
//! from one lookup.
//!
//! The owner admits every flight ([`crate::shard::flights`]); the board is where it publishes them. It
//! lists, per id, the **current** flight's [`Cell`]: the flights map publishes a flight in the
//! step that makes it current and withdraws it in the step that ends that (it lands, or a write,
//! a push or a flush overtakes it), both on the owner's task. A miss that finds its id here joins
//! that flight on its own task — counted `coalesced`, it waits on the cell for the one answer —
//! so a herd of misses costs the owner one message, not one per caller.
//!
//! An id with nothing listed and no write of it on its way to Valkey may instead be **read**:
//! the miss lists a read and reads Valkey on its own task (`crate::handle::miss`). A fresh value is
//! *settled* — put in L1 under the board's lock, only if the read is still listed — and answered;
//! anything else goes to the owner as a miss. A read is never joined: misses that find one go to
//! the owner, whose flight replaces it on the board, so no caller ever waits on another caller's
//! task (a caller that stops polling its future holds up nobody). The owner withdraws a read when
//! a write of the id starts, when a push for the id arrives, and on a flush, each *before* it
//! changes L1; it marks the id as written while the write is on the wire, so that no read starts
//! then. So a read never leaves in L1 what a write replaced or a push announced gone, and an L2
//! hit costs its caller one round trip and no hand-off.
//!
//! The mark of a write that is running is held by the write's own task ([`RunningWrite`](running::RunningWrite)), not
//! by the owner: an owner that crashes leaves its writes on the wire, and they land all the same.
//! So the marks outlive it, no read of those ids starts until they land, and the restarted owner
//! queues its flights and writes of them behind them ([`Board::landed`]).
//!
//! A current flight that filled a value L1 keeps **lands here**, on its own task
//! ([`Board::land_current`]): under the board's lock, while it is still listed and no write and
//! no overtaken flight of its id is in motion, it stores into L1 and answers its cell, which is
//! what the owner would do with it at that instant; the owner only ends it afterwards. Every
//! change the owner makes to an id reaches the board before L1, so it is ordered before or after
//! that landing as a whole.
//!
//! A flight's [`Cell`] is the one thing its callers wait on, however they came to it: the caller
//! whose miss started it (the owner hands it the cell, as its *leader*), the callers who joined
//! through the owner's mailbox, and those who joined here. Joining through the board is the same
//! as joining through the owner's mailbox, only earlier: the caller joins the flight that was
//! current when it looked, which is the flight its message would have joined had the owner read
//! it at that instant. A `put` that has returned has already withdrawn the flight it overtook, so
//! a read made after it never joins one that reads what the put replaced.
//!
//! A cell is answered once, with the flight's answer as its leader sees it; each caller works out
//! its own origin from it (`crate::handle::miss::follow`). A flight that answers early (its soft
//! timeout's stale copy) answers its cell and publishes a fresh one for later joiners; a flight
//! that changed nothing (an early refresh that lost the lock, a load a put overtook) answers "fly
//! again", and its callers miss once more through the owner; an owner that dies drops its cells'
//! [`Answerer`]s, which answer [`Error::Stopped`].

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::fetched::Fetched;
use crate::state::flight_id::FlightId;

/// What a flight's callers receive: its answer as its leader sees it, or `None` to fly again.
pub(crate) type Answered<V> = Option<Result<Fetched<V>>>;

/// A table's boards, one per shard: a miss locks only the board of its id's shard, so misses of
/// ids in different shards never wait on one another, and each owner publishes on its own.
pub(crate) struct Boards<K, V>(Box<[Arc<Board<K, V>>]>);

/// The current flights and reads of one shard, by id, and the ids being written.
pub(crate) struct Board<K, V> {
    /// What the board knows of each id, kept only while some of it holds.
    ids: Mutex<HashMap<K, OnBoard<V>>>,
    /// Woken when an id's last running write lands.
    landings: Notify,
}

/// The next [`ReadId`], process-wide.
static NEXT_READ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Everything the board knows of one id: what a miss of it may do on its own task follows from
/// this alone, read under the board's lock in one lookup.
struct OnBoard<V> {
    /// The current flight, or a caller's read.
    listed: Option<Listed<V>>,
    /// A write of the id is on its way to Valkey, as the owner knows it: no read starts.
    writing: bool,
    /// An overtaken flight of the id still runs: no read starts either, so that only the owner
    /// stores what is read of the id until those flights land.
    detached: bool,
    /// Write tasks of the id running: marked by the tasks themselves, so that an owner's crash
    /// clears none of them.
    running: usize,
}

impl<V> OnBoard<V> {
    const NOTHING: OnBoard<V> = OnBoard {
        listed: None,
        writing: false,
        detached: false,
        running: 0,
    };

    /// A write of the id, or a flight the owner alone may land, is in motion: nothing of the id
    /// may enter L1 but through the owner.
    fn in_motion(&self) -> bool {
        self.writing || self.detached || self.running > 0
    }

    fn is_empty(&self) -> bool {
        self.listed.is_none() && !self.in_motion()
    }

    /// The read listed, if it is `read` (any read, with `None`).
    fn lists_read(&self, read: Option<ReadId>) -> bool {
        matches!(self.listed, Some(Listed::Read(r)) if read.is_none_or(|read| r == read))
    }
}

/// What is listed for an id: the owner's current flight (its cell, and which flight it is), or a
/// caller's read.
enum Listed<V> {
    Flight(Arc<Cell<V>>, FlightId),
    Read(ReadId),
}

/// Names one read, so that only the read listed can settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadId(u64);

/// What a miss finds on the board.
pub(crate) enum Entered<V> {
    /// The id's current flight, joined: wait on its cell.
    Joined(Arc<Cell<V>>),
    /// Nothing listed, and the id may be read: this caller reads it.
    Read(ReadId),
    /// Ask the owner (a read of the id is out, a write of it is on its way, or no Valkey).
    Owner,
}

/// One flight's answer, for every caller waiting on it.
pub(crate) struct Cell<V> {
    answer: OnceLock<Answered<V>>,
    woken: Notify,
    /// Callers who took the cell: its leader, and those who joined.
    joined: AtomicUsize,
}

/// The owner's end of a cell: answers it [`Error::Stopped`] if dropped unanswered (the owner
/// died with the flight).
pub(crate) struct Answerer<V>(Arc<Cell<V>>);

impl<K: Eq + Hash, V> Boards<K, V> {
    /// Empty boards for `shards` shards.
    pub(crate) fn new(shards: usize) -> Self {
        Boards((0..shards.max(1)).map(|_| Arc::new(Board::new())).collect())
    }

    /// Shard `shard`'s board.
    pub(crate) fn shard(&self, shard: usize) -> &Arc<Board<K, V>> {
        &self.0[shard]
    }

    /// Runs `f` under every board's lock, taken in shard order: no read settles and no flight
    /// lands on its own task anywhere in the table meanwhile.
    pub(crate) fn exclusive(&self, f: impl FnOnce()) {
        let _ids: Vec<_> = self.0.iter().map(|board| board.ids()).collect();
        f();
    }
}

impl<K: Eq + Hash, V> Board<K, V> {
    pub(crate) fn new() -> Self {
        Board {
            ids: Mutex::new(HashMap::new()),
            landings: Notify::new(),
        }
    }

    fn ids(&self) -> MutexGuard<'_, HashMap<K, OnBoard<V>>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes what the board knows of `id` with `change`, and forgets the id once nothing of it
    /// holds.
    fn change<Q, T>(&self, id: &Q, change: impl FnOnce(&mut OnBoard<V>) -> T) -> Option<T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut ids = self.ids();
        let on = ids.get_mut(id)?;
        let changed = change(on);
        if on.is_empty() {
            ids.remove(id);
        }
        Some(changed)
    }

    /// As [`change`](Self::change), for an id the board may not know yet.
    fn mark(&self, id: &K, change: impl FnOnce(&mut OnBoard<V>))
    where
        K: Clone,
    {
        let mut ids = self.ids();
        match ids.get_mut(id) {
            Some(on) => {
                change(on);
                if on.is_empty() {
                    ids.remove(id);
                }
            }
            None => {
                let mut on = OnBoard::NOTHING;
                change(&mut on);
                if !on.is_empty() {
                    ids.insert(id.clone(), on);
                }
            }
        }
    }

    /// A miss on `id`: joins the flight listed; else, if nothing is listed, `readable`, and no
    /// write of the id is on its way, lists a read of it for this caller (`owned` makes the key).
    ///
    /// A key whose `Hash` or `Eq` panics is sent to the owner, whose flights map meets the same
    /// panic, crashes, answers its callers [`Error::Stopped`] and is restarted, as for any miss
    /// (the panic does not unwind into the caller's task; the map is left as it was).
    pub(crate) fn enter<Q>(&self, id: &Q, readable: bool, owned: impl FnOnce() -> K) -> Entered<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let enter = || {
            let mut ids = self.ids();
            let on = ids.get(id);
            match on.and_then(|on| on.listed.as_ref()) {
                Some(Listed::Flight(cell, _)) => {
                    cell.joined.fetch_add(1, Relaxed);
                    return Entered::Joined(Arc::clone(cell));
                }
                Some(Listed::Read(_)) => return Entered::Owner,
                None if !readable || on.is_some_and(OnBoard::in_motion) => return Entered::Owner,
                None => {}
            }
            let read = ReadId(NEXT_READ.fetch_add(1, Relaxed));
            let listed = Some(Listed::Read(read));
            match ids.get_mut(id) {
                Some(on) => on.listed = listed,
                None => {
                    let on = OnBoard {
                        listed,
                        ..OnBoard::NOTHING
                    };
                    ids.insert(owned(), on);
                }
            }
            Entered::Read(read)
        };
        std::panic::catch_unwind(AssertUnwindSafe(enter)).unwrap_or(Entered::Owner)
    }

    /// `true` when nothing is listed for `id` and no write of it is on its way or running: a copy
    /// read from Valkey now cannot be older than what a landing of this process would serve next.
    pub(crate) fn quiet<Q>(&self, id: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The board keeps an id only while something of it holds.
        let quiet = || !self.ids().contains_key(id);
        // A key whose `Hash` or `Eq` panics: not quiet (the peek answers nothing).
        std::panic::catch_unwind(AssertUnwindSafe(quiet)).unwrap_or(false)
    }

    /// The read `read` of `id` found a fresh value: if it is still listed, `keep` runs (the L1
    /// insert) under the board's lock and the read is withdrawn; `false` if it was not listed (a
    /// write, a push or a flush overtook it, or a flight replaced it).
    pub(crate) fn settle(&self, id: &K, read: ReadId, keep: impl FnOnce()) -> bool {
        let settled = self.change(id, |on| {
            let listed = on.lists_read(Some(read));
            if listed {
                keep();
                on.listed = None;
            }
            listed
        });
        settled == Some(true)
    }

    /// Runs `f` under the board's lock: no read settles (stores into L1) meanwhile.
    pub(crate) fn exclusive(&self, f: impl FnOnce()) {
        let _ids = self.ids();
        f();
    }

    /// Withdraws the read `read` of `id`, if it is the one listed (its caller is done with it).
    pub(crate) fn withdraw_read(&self, id: &K, read: ReadId) {
        self.withdraw_reads(id, Some(read));
    }

    /// Withdraws the read of `id`, if one is listed (its value may be older than a change the
    /// owner is about to make).
    pub(crate) fn overtake_read(&self, id: &K) {
        self.withdraw_reads(id, None);
    }

    fn withdraw_reads(&self, id: &K, read: Option<ReadId>) {
        self.change(id, |on| {
            if on.lists_read(read) {
                on.listed = None;
            }
        });
    }

    /// Withdraws every read (pushes may have been missed).
    pub(crate) fn overtake_reads(&self) {
        self.ids().retain(|_, on| {
            if on.lists_read(None) {
                on.listed = None;
            }
            !on.is_empty()
        });
    }

    /// A write of `id` is on its way to Valkey (`true`) or none is any more (`false`); a read
    /// listed when it starts is withdrawn.
    pub(crate) fn writing(&self, id: &K, writing: bool)
    where
        K: Clone,
    {
        self.mark(id, |on| {
            if writing && on.lists_read(None) {
                on.listed = None;
            }
            on.writing = writing;
        });
    }

    /// An overtaken flight of `id` runs (`true`), or none does any more (`false`): while one
    /// does, misses of the id go to the owner, which orders what every flight of it stores.
    pub(crate) fn detached(&self, id: &K, running: bool)
    where
        K: Clone,
    {
        self.mark(id, |on| on.detached = running);
    }

    /// Joins what is listed for `id`, if anything (the tests' view of [`enter`](Self::enter)).
    #[cfg(test)]
    pub(crate) fn join(&self, id: &K) -> Option<Arc<Cell<V>>>
    where
        K: Clone,
    {
        match self.enter(id, false, || id.clone()) {
            Entered::Joined(cell) => Some(cell),
            _ => None,
        }
    }

    /// Lists `answerer`'s cell as the current flight of `id`, `flight` (in place of a read: the
    /// flight's answer is at least as new).
    pub(crate) fn publish(&self, id: K, flight: FlightId, answerer: &Answerer<V>) {
        let listed = Some(Listed::Flight(Arc::clone(&answerer.0), flight));
        let mut ids = self.ids();
        match ids.get_mut(&id) {
            Some(on) => on.listed = listed,
            None => {
                ids.insert(
                    id,
                    OnBoard {
                        listed,
                        ..OnBoard::NOTHING
                    },
                );
            }
        }
    }

    /// The flight `flight` of `id` landed with a value to answer: if it is still the id's current
    /// flight, with no overtaken flight of the id running and no write of it on its way, `keep`
    /// runs (the L1 insert) under the board's lock, the flight is no longer listed, and its cell
    /// is returned, for the flight to answer on its own task. That is the landing the owner would make of it now: the
    /// owner changes the board before it changes L1 (a write, a push, a flush, a mark), so a
    /// change either comes after this (and undoes the entry as it would the owner's) or has
    /// already withdrawn the flight (`None`: the owner lands it).
    pub(crate) fn land_current(
        &self,
        id: &K,
        flight: FlightId,
        keep: impl FnOnce(),
    ) -> Option<Arc<Cell<V>>> {
        self.change(id, |on| {
            let cell = match &on.listed {
                Some(Listed::Flight(cell, listed)) if *listed == flight => Arc::clone(cell),
                _ => return None,
            };
            if on.in_motion() {
                return None;
            }
            keep();
            // Landed: a miss from now on reads L1 or Valkey, as after the owner's landing, rather
            // than join an answer it did not wait for.
            on.listed = None;
            Some(cell)
        })
        .flatten()
    }

    /// Withdraws `answerer`'s cell from `id`, if it is the one listed.
    pub(crate) fn withdraw(&self, id: &K, answerer: &Answerer<V>) {
        self.change(id, |on| {
            if matches!(&on.listed, Some(Listed::Flight(c, _)) if Arc::ptr_eq(c, &answerer.0)) {
                on.listed = None;
            }
        });
    }

    /// Withdraws the cells and the owner's write marks of the ids `mine` picks (a new owner of
    /// them starts with no flights and no writes of its own); the running writes' marks stay
    /// until they land.
    pub(crate) fn clear(&self, mine: impl Fn(&K) -> bool) {
        self.ids().retain(|id, on| {
            if mine(id) {
                on.listed = None;
                on.writing = false;
                on.detached = false;
            }
            !on.is_empty()
        });
    }

    /// Ids listed now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ids().values().filter(|on| on.listed.is_some()).count()
    }
}

impl<V> Cell<V> {
    /// Answers every caller who took the cell (the first answer stands), and wakes them.
    pub(crate) fn answer(&self, answered: Answered<V>) {
        if self.answer.set(answered).is_ok() {
            self.woken.notify_waiters();
        }
    }

    /// The answer, once the flight gives it.
    pub(crate) async fn wait(&self) -> Answered<V> {
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

    /// Whether the cell has its answer.
    pub(crate) fn answered(&self) -> bool {
        self.0.answer.get().is_some()
    }

    /// Callers who took the cell so far.
    pub(crate) fn joined(&self) -> usize {
        self.0.joined.load(Relaxed)
    }

    /// The cell, for one more caller to wait on.
    pub(crate) fn take(&self) -> Arc<Cell<V>> {
        self.0.joined.fetch_add(1, Relaxed);
        Arc::clone(&self.0)
    }

    /// Answers every caller who took the cell (the first answer stands), and wakes them.
    pub(crate) fn answer(&self, answered: Answered<V>) {
        self.0.answer(answered);
    }
}

impl<V> Drop for Answerer<V> {
    fn drop(&mut self) {
        if self.0.answer.get().is_none() {
            self.answer(Some(Err(Error::Stopped)));
        }
    }
}

mod running;
#[cfg(test)]
mod tests;
