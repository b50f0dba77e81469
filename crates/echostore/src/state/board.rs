//! The board: one per shard ([`Boards`]), holding everything this process has in motion for
//! each id of the shard as one [`IdState`] (`board/id_state.rs` lists every field and who changes
//! it): a caller's read, the flight a miss joins, the writes on their way, the overtaken flights,
//! the running write tasks, and what outlives an owner besides them (an unsettled mark, an entry
//! awaiting key tracking's confirmation, the losers' wake-ups). The owner changes it through its
//! flights map ([`crate::shard::flights`]); callers read it on their own tasks, under the board's
//! lock, and an id is kept only while something of it holds, so a miss decides from one lookup.
//!
//! A miss that finds its id's **current flight** joins it on its own task — counted `coalesced`,
//! it waits on the flight's [`Cell`] for the one answer — so a herd of misses costs the owner one
//! message, not one per caller. Joining here is joining through the owner's mailbox, only
//! earlier: the caller joins the flight that was current when it looked, which is the flight its
//! message would have joined had the owner read it at that instant. A `put` that has returned has
//! already detached the flight it overtook, so a read made after it never joins one that reads
//! what the put replaced.
//!
//! An id with no flight and nothing in motion (no write on its way or running, no overtaken
//! flight) may instead be **read**: the miss lists a read and reads Valkey on its own task
//! (`crate::handle::miss`). A fresh value is *settled* — put in L1 under the board's lock, only
//! if the read is still listed — and answered; anything else goes on to the id's flight. A read
//! is never joined: misses that find one start the id's flight instead, which replaces it, so no
//! caller ever waits on another caller's task.
//!
//! A miss with no flight to join is **admitted** on its caller's task ([`Board::admit`]) exactly
//! as the owner would admit it at that instant: with nothing of the id in motion, the caller
//! starts the flight and launches it itself; anything else (a write on its way, an overtaken
//! flight, a landing the owner is making, an owner restarting) goes to the owner. The owner
//! withdraws a read when a flight, a write or a push of the id comes, and on a flush, each
//! *before* it changes L1; so a read never leaves in L1 what a write replaced or a push announced
//! gone, and an L2 hit costs its caller one round trip and no hand-off.
//!
//! A current flight that filled a value L1 keeps **lands here**, on its own task
//! ([`Board::land_current`]): under the board's lock, while it is still current and nothing else
//! of its id is in motion, it stores into L1, leaves the id's state and answers its cell, which
//! is what the owner would do with it at that instant. Every change the owner makes to an id
//! reaches the board before L1, so it is ordered before or after that landing as a whole.
//!
//! The running write tasks are counted by the tasks themselves
//! ([`RunningWrite`](running::RunningWrite)): an owner that crashes leaves its writes on the wire,
//! and they land all the same, so no read of those ids starts until they do, and the restarted
//! owner queues its flights and writes of them behind them ([`Board::landed`]). An unsettled
//! mark, an entry awaiting confirmation and the losers' wake-ups outlive an owner too
//! (`id_state.rs` says why). Everything else of an id is the owner's: an owner that stops or crashes clears it
//! ([`Board::release`]), answering its flights' callers [`Error::Stopped`] (an [`Answerer`]
//! dropped unanswered does), and so does the owner that replaces it.
//!
//! A cell is answered once, with the flight's answer as its leader sees it; each caller works out
//! its own origin from it (`crate::handle::miss::follow`). A flight that answers early (its soft
//! timeout's stale copy) answers its cell and takes a fresh one for later joiners; a flight that
//! changed nothing (an early refresh that lost the lock, a load a put overtook) answers "fly
//! again", and its callers miss once more through the owner. A load fenced out by a write it may
//! never hear of answers only the callers seated by the moment it asked for its lock: each
//! caller's [`Seat`] records when it took its seat, and the later ones fly again.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::fetched::Fetched;
use crate::state::flight_id::FlightId;
use crate::state::pending_write::PendingWrite;
pub(crate) use flight::{Flight, Overtaker, Standing};
pub(crate) use id_state::{Current, IdState, Writes};

/// What a flight's callers receive: its answer as its leader sees it, or `None` to fly again.
pub(crate) type Answered<V> = Option<Result<Fetched<V>>>;

/// The shard of `id` among `shards`: the same for a key and its borrowed form (`String` and
/// `str` hash alike), and the same in every run, so it can be reasoned about in tests.
pub(crate) fn shard_of<Q: std::hash::Hash + ?Sized>(id: &Q, shards: usize) -> usize {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    if shards <= 1 {
        return 0;
    }
    let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(id);
    (hash % shards as u64) as usize
}

/// A table's boards, one per shard: a miss locks only the board of its id's shard, so misses of
/// ids in different shards never wait on one another, and each owner changes its own.
pub(crate) struct Boards<K, V>(Box<[Arc<Board<K, V>>]>);

/// Everything one shard has in motion, by id. `W` is a write waiting for its turn.
pub(crate) struct Board<K, V, W = PendingWrite<V>> {
    /// Each id with something in motion, and all of it ([`IdState`]).
    ids: Mutex<HashMap<K, IdState<V, W>>>,
    /// Which owner holds the board (each new one takes the next number): only it clears the
    /// board when it goes.
    owner: AtomicU64,
    /// The owner actor that holds the board (its pid + 1; 0 while none does): a caller admits
    /// itself to a flight only while the owner it would report to holds the board.
    holder: AtomicU64,
    /// Woken when an id's last running write lands.
    landings: Notify,
}

/// The next [`ReadId`], process-wide.
static NEXT_READ: AtomicU64 = AtomicU64::new(0);

/// Names one read, so that only the read listed can settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadId(u64);

/// What a miss finds on the board.
pub(crate) enum Entered<V> {
    /// The id's current flight, joined: wait on its cell.
    Joined(Seat<V>),
    /// No flight, and the id may be read: this caller reads it.
    Read(ReadId),
    /// Ask the owner (a read of the id is out, a write of it is on its way, or no Valkey).
    Owner,
}

/// What a caller's own admission of a miss came to ([`Board::admit`]).
pub(crate) enum Admission<V> {
    /// The id's current flight, joined: wait on its cell.
    Joined(Seat<V>),
    /// L1 holds a fresh entry by now.
    Hit(Fetched<V>),
    /// A flight of the id started, loading: the caller launches it and leads it.
    Launch(FlightId, Seat<V>),
    /// Ask the owner: something of the id is in motion, or the owner the flight would report to
    /// does not hold the board.
    Owner,
}

/// One flight's answer, for every caller waiting on it.
pub(crate) struct Cell<V> {
    /// The answer, and the moment from which a caller's join makes it fly again instead (`None`:
    /// the answer is every caller's).
    answer: OnceLock<(Answered<V>, Option<Instant>)>,
    woken: Notify,
    /// Callers who took the cell: its leader, and those who joined.
    joined: AtomicUsize,
    /// When the first caller took it: the one whose miss started the flight, if any.
    first_seated: OnceLock<Instant>,
}

/// One caller's place at a flight's cell: the cell, and when the caller took it.
pub(crate) struct Seat<V> {
    cell: Arc<Cell<V>>,
    taken_at: Instant,
}

impl<V> Clone for Seat<V> {
    fn clone(&self) -> Self {
        Seat {
            cell: Arc::clone(&self.cell),
            taken_at: self.taken_at,
        }
    }
}

impl<V> Seat<V> {
    /// Whether both seats are at one flight's cell.
    #[cfg(test)]
    pub(crate) fn same_cell(&self, other: &Seat<V>) -> bool {
        Arc::ptr_eq(&self.cell, &other.cell)
    }

    /// This caller's answer, once the flight gives it: `None` (fly again) also when the answer is
    /// only for callers seated by a moment before this one took its seat.
    pub(crate) async fn wait(&self) -> Answered<V> {
        let (answer, cutoff) = self.cell.wait().await;
        match cutoff {
            Some(cutoff) if self.taken_at > cutoff => None,
            _ => answer,
        }
    }
}

/// The owner's end of a cell: answers it [`Error::Stopped`] if dropped unanswered (the owner
/// died with the flight).
pub(crate) struct Answerer<V>(Arc<Cell<V>>);

impl<K, V> Clone for Boards<K, V> {
    /// The same boards, shared.
    fn clone(&self) -> Self {
        Boards(self.0.clone())
    }
}

impl<K: Eq + Hash, V> Boards<K, V> {
    /// Empty boards for `shards` shards.
    pub(crate) fn new(shards: usize) -> Self {
        Boards((0..shards.max(1)).map(|_| Arc::new(Board::new())).collect())
    }

    /// Shard `shard`'s board.
    pub(crate) fn shard(&self, shard: usize) -> &Arc<Board<K, V>> {
        &self.0[shard]
    }

    /// The board of `id`'s shard.
    pub(crate) fn of<Q: Hash + ?Sized>(&self, id: &Q) -> &Arc<Board<K, V>> {
        &self.0[shard_of(id, self.0.len())]
    }

    /// Every shard's board.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Arc<Board<K, V>>> {
        self.0.iter()
    }

    /// Flights running or queued on every board.
    pub(crate) fn flights(&self) -> usize {
        self.0.iter().map(|board| board.flights()).sum()
    }

    /// The id whose L1 entry made from `fingerprint`'s bytes waits for key tracking's confirmation
    /// and renders as `rendered`: how a confirmation finds an id its key type cannot parse back
    /// (`Key::from_rendered`). Few ids wait at once (each for one round trip), so each board is
    /// searched in turn.
    pub(crate) fn awaiting(
        &self,
        rendered: &[u8],
        fingerprint: crate::valkey::envelope::Fingerprint,
    ) -> Option<K>
    where
        K: crate::wire::key::Key,
    {
        self.0.iter().find_map(|board| {
            board.ids().iter().find_map(|(id, state)| {
                let waits = matches!(&state.unconfirmed, Some((fp, _)) if *fp == fingerprint);
                (waits && *id.render() == *rendered).then(|| id.clone())
            })
        })
    }

    /// Under every board's lock, taken in shard order, forgets every L1 entry waiting for key
    /// tracking's confirmation, then runs `then`: no read settles, no flight lands on its own task
    /// and no confirmation lands anywhere in the table meanwhile.
    pub(crate) fn forget_unconfirmed(&self, then: impl FnOnce()) {
        let mut boards: Vec<_> = self.0.iter().map(|board| board.ids()).collect();
        for ids in &mut boards {
            ids.retain(|_, state| {
                state.unconfirmed = None;
                !state.is_empty()
            });
        }
        then();
    }
}

impl<K, V, W> Board<K, V, W> {
    pub(crate) fn new() -> Self {
        Board {
            ids: Mutex::new(HashMap::new()),
            owner: AtomicU64::new(0),
            holder: AtomicU64::new(0),
            landings: Notify::new(),
        }
    }

    /// The ids' states, locked: the flights map changes them through this.
    pub(crate) fn ids(&self) -> MutexGuard<'_, HashMap<K, IdState<V, W>>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new owner takes the board, as the actor `holder` (its pid; `None`: no actor, and no
    /// caller admits itself): what the one before held of its ids is cleared (its flights'
    /// callers are answered [`Error::Stopped`]); the running writes stay. Returns the new
    /// owner's number, for [`release`](Self::release).
    pub(crate) fn take_over(&self, holder: Option<u64>) -> u64 {
        let mut ids = self.ids();
        Self::clear_owned(&mut ids);
        self.holder.store(holder.map_or(0, |pid| pid + 1), Relaxed);
        self.owner.fetch_add(1, Relaxed) + 1
    }

    /// Owner `owner` goes (it stopped or crashed): what it held is cleared, unless an owner after
    /// it has taken the board already.
    pub(crate) fn release(&self, owner: u64) {
        let mut ids = self.ids();
        if self.owner.load(Relaxed) == owner {
            Self::clear_owned(&mut ids);
            self.holder.store(0, Relaxed);
        }
    }

    fn clear_owned(ids: &mut HashMap<K, IdState<V, W>>) {
        ids.retain(|_, state| {
            state.clear_owned();
            !state.is_empty()
        });
    }
}

impl<K: Eq + Hash, V, W> Board<K, V, W> {
    /// Changes what the board holds of `id` with `change`, and forgets the id once nothing of it
    /// holds; `None` when the board holds nothing of it.
    pub(crate) fn change<Q, T>(
        &self,
        id: &Q,
        change: impl FnOnce(&mut IdState<V, W>) -> T,
    ) -> Option<T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut ids = self.ids();
        let state = ids.get_mut(id)?;
        let changed = change(state);
        if state.is_empty() {
            ids.remove(id);
        }
        Some(changed)
    }

    /// Changes what the board holds of `id` with `change`, starting from nothing if it holds
    /// nothing of it yet, and forgets the id once nothing of it holds.
    pub(crate) fn change_or_make<T>(
        &self,
        id: K,
        change: impl FnOnce(&mut IdState<V, W>) -> T,
    ) -> T {
        use std::collections::hash_map::Entry;
        match self.ids().entry(id) {
            Entry::Occupied(mut held) => {
                let changed = change(held.get_mut());
                if held.get().is_empty() {
                    held.remove();
                }
                changed
            }
            Entry::Vacant(vacant) => {
                let mut state = IdState::NOTHING;
                let changed = change(&mut state);
                if !state.is_empty() {
                    vacant.insert(state);
                }
                changed
            }
        }
    }

    /// Up to `at_most` of what `pick` takes from the ids' states.
    pub(crate) fn pick<T>(
        &self,
        at_most: usize,
        pick: impl FnMut((&K, &IdState<V, W>)) -> Option<T>,
    ) -> Vec<T> {
        self.ids().iter().filter_map(pick).take(at_most).collect()
    }

    /// A miss on `id`: joins the current flight; else, if no read is listed, `readable`, and
    /// nothing of the id is in motion, lists a read of it for this caller (`owned` makes the key).
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
            if let Some(state) = ids.get(id) {
                if let Some(flight) = state.current() {
                    return Entered::Joined(flight.cell.take());
                }
                if state.read.is_some() || state.in_motion() {
                    return Entered::Owner;
                }
            }
            if !readable {
                return Entered::Owner;
            }
            let read = ReadId(NEXT_READ.fetch_add(1, Relaxed));
            match ids.get_mut(id) {
                Some(state) => state.read = Some(read),
                None => {
                    let state = IdState {
                        read: Some(read),
                        ..IdState::NOTHING
                    };
                    ids.insert(owned(), state);
                }
            }
            Entered::Read(read)
        };
        std::panic::catch_unwind(AssertUnwindSafe(enter)).unwrap_or(Entered::Owner)
    }

    /// A miss on `id` admitted on the caller's task, exactly as its owner would admit it now:
    /// it joins the current flight; else, with nothing of the id in motion, it takes L1's fresh
    /// entry (`hit`, looked at under the lock: a write or a landing may have stored one since
    /// the caller's look) or starts a flight, loading at once, for the caller to launch. Only
    /// while the owner actor `holder` (the pid the flight will report to) holds the board: an
    /// owner that goes clears its flights, answering their callers, so no flight is left with
    /// nobody to end it.
    ///
    /// A key whose `Hash` or `Eq` panics is sent to the owner, as in [`enter`](Self::enter).
    pub(crate) fn admit<Q>(
        &self,
        id: &Q,
        holder: u64,
        owned: impl FnOnce() -> K,
        hit: impl FnOnce() -> Option<Fetched<V>>,
    ) -> Admission<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let admit = || {
            let mut ids = self.ids();
            if self.holder.load(Relaxed) != holder.wrapping_add(1) {
                return Admission::Owner;
            }
            if let Some(state) = ids.get(id) {
                if let Some(flight) = state.current() {
                    return Admission::Joined(flight.cell.take());
                }
                if state.in_motion() {
                    return Admission::Owner;
                }
            }
            if let Some(hit) = hit() {
                return Admission::Hit(hit);
            }
            let flight = Flight::new(FlightId::next());
            let (fid, cell) = (flight.id, flight.cell.take());
            match ids.get_mut(id) {
                Some(state) => state.start(flight, true),
                None => {
                    let mut state = IdState::NOTHING;
                    state.start(flight, true);
                    ids.insert(owned(), state);
                }
            }
            Admission::Launch(fid, cell)
        };
        std::panic::catch_unwind(AssertUnwindSafe(admit)).unwrap_or(Admission::Owner)
    }

    /// `true` when nothing of `id` is in motion or listed: a copy read from Valkey now cannot be
    /// older than what a landing of this process would serve next.
    pub(crate) fn quiet<Q>(&self, id: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let quiet = || self.ids().get(id).is_none_or(IdState::is_quiet);
        // A key whose `Hash` or `Eq` panics: not quiet (the peek answers nothing).
        std::panic::catch_unwind(AssertUnwindSafe(quiet)).unwrap_or(false)
    }

    /// `true` while `id`'s L1 entry waits for key tracking's confirmation (it is not fresh
    /// until then, without having expired). A key whose `Hash` or `Eq` panics: `false`.
    pub(crate) fn awaits_confirmation<Q>(&self, id: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let waits = || self.ids().get(id).is_some_and(|s| s.unconfirmed.is_some());
        std::panic::catch_unwind(AssertUnwindSafe(waits)).unwrap_or(false)
    }

    /// The read `read` of `id` found a fresh value: if it is still listed, `keep` runs (the L1
    /// insert, given the id's state) under the board's lock and the read is withdrawn; `false` if it was not listed (a
    /// write, a push or a flush overtook it, or a flight replaced it).
    pub(crate) fn settle(
        &self,
        id: &K,
        read: ReadId,
        keep: impl FnOnce(&mut IdState<V, W>),
    ) -> bool {
        let settled = self.change(id, |state| {
            let listed = state.lists_read(Some(read));
            if listed {
                keep(state);
                state.read = None;
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
        self.change(id, |state| {
            if state.lists_read(Some(read)) {
                state.read = None;
            }
        });
    }

    /// Joins the current flight of `id`, if any (the tests' view of [`enter`](Self::enter)).
    #[cfg(test)]
    pub(crate) fn join(&self, id: &K) -> Option<Seat<V>>
    where
        K: Clone,
    {
        match self.enter(id, false, || id.clone()) {
            Entered::Joined(cell) => Some(cell),
            _ => None,
        }
    }

    /// The flight `flight` of `id` landed with a value to answer: if it is still the id's current
    /// flight, loading, and nothing else of the id is in motion, `keep` runs (the L1 insert,
    /// given the id's state) under the board's lock and the flight leaves the id's state, returned for it to answer on
    /// its own task. That is the landing the owner would make of it now: the owner changes the
    /// board before it changes L1 (a write, a push, a flush, a mark), so a change either comes
    /// after this (and undoes the entry as it would the owner's) or has already detached the
    /// flight (`None`: the owner lands it).
    pub(crate) fn land_current(
        &self,
        id: &K,
        flight: FlightId,
        keep: impl FnOnce(&mut IdState<V, W>),
    ) -> Option<Flight<V>> {
        self.change(id, |state| {
            let loading = matches!(&state.current, Current::Loading(f) if f.id == flight);
            if !loading || state.in_motion() {
                return None;
            }
            keep(state);
            // Landed: a miss from now on reads L1 or Valkey, as after the owner's landing, rather
            // than join an answer it did not wait for.
            state.take_current(flight)
        })
        .flatten()
    }

    /// Wakes the losers of `id` in this process: a push said its value or lock key changed.
    pub(crate) fn wake_losers<Q>(&self, id: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // A key whose `Hash` or `Eq` panics: its losers wake at their next safety poll.
        let wake = || self.change(id, IdState::wake_losers);
        let _ = std::panic::catch_unwind(AssertUnwindSafe(wake));
    }

    /// Wakes every loser of the shard (pushes may have been missed).
    pub(crate) fn wake_all_losers(&self) {
        let mut ids = self.ids();
        ids.values_mut().for_each(IdState::wake_losers);
        ids.retain(|_, state| !state.is_empty());
    }

    /// Flights running or queued, current and overtaken.
    pub(crate) fn flights(&self) -> usize {
        let flights = |s: &IdState<V, W>| s.detached.len() + usize::from(s.current().is_some());
        self.ids().values().map(flights).sum()
    }
}

impl<V> Cell<V> {
    /// Answers the callers who took the cell by `cutoff` (every one: `None`), the others flying
    /// again (the first answer stands), and wakes them.
    pub(crate) fn answer(&self, answered: Answered<V>, cutoff: Option<Instant>) {
        if self.answer.set((answered, cutoff)).is_ok() {
            self.woken.notify_waiters();
        }
    }

    /// The answer and its cutoff, once the flight gives them.
    async fn wait(&self) -> (Answered<V>, Option<Instant>) {
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
            first_seated: OnceLock::new(),
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

    /// When the first caller took the cell, if one has.
    pub(crate) fn first_seated(&self) -> Option<Instant> {
        self.0.first_seated.get().copied()
    }

    /// A seat at the cell, for one more caller to wait on.
    pub(crate) fn take(&self) -> Seat<V> {
        self.0.joined.fetch_add(1, Relaxed);
        let taken_at = Instant::now();
        self.0.first_seated.get_or_init(|| taken_at);
        Seat {
            cell: Arc::clone(&self.0),
            taken_at,
        }
    }

    /// Answers the callers who took the cell by `cutoff` (every one: `None`), the others flying
    /// again (the first answer stands), and wakes them.
    pub(crate) fn answer(&self, answered: Answered<V>, cutoff: Option<Instant>) {
        self.0.answer(answered, cutoff);
    }
}

impl<V> Drop for Answerer<V> {
    fn drop(&mut self) {
        if self.0.answer.get().is_none() {
            self.answer(Some(Err(Error::Stopped)), None);
        }
    }
}

mod flight;
pub(crate) mod id_state;
mod running;
#[cfg(test)]
mod tests;
