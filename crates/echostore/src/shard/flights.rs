//! The flights map: per id, the one load that misses join, the Valkey writes it must wait for,
//! and the loads that writes overtook. The owner tells it what happened; it answers what to do.
//!
//! This is the Elixir owner's `flights` map made explicit, with moka's waiter states as the
//! model. For each id it holds one [`IdState`] (`flights/id_state.rs`), whose phases are enums:
//!
//! - the **current flight**, *none*, *queued* or *loading*: the one a new miss joins;
//! - the id's **Valkey writes** (`put`/`invalidate`): *none*, or one *on the wire* with the
//!   writes waiting behind it, in arrival order, and whether another process's change overtook
//!   them (then the last of them keeps nothing in L1);
//! - the **overtaken** flights of the id still running (detached: a write or a change overtook
//!   them), each with its callers' cell.
//!
//! The ordering rule, stated once: **a fill never reads back what a write is replacing or
//! deleting, and a write that overtakes a fill wins.** So a miss that arrives while a write of its
//! id is running is *queued* and launches only when the last write has landed (it then reads what
//! the write left); and a write that arrives while a flight is *running* detaches that flight —
//! it still answers its own waiters when it lands (with what L1 holds then, if anything, so that
//! no answer is ahead of L1), but its value is not stored, and the next miss starts a new flight. A remote invalidation overtakes a running flight the same way. One
//! exception keeps a process from reading back in time: a flight that a `put` of this process
//! overtook sends its callers to fly again instead, since what it read may be newer than the
//! put's value that L1 keeps (another process's write whose push is late). While an overtaken
//! flight runs, misses of its id go to the owner (the board holds its reads), so L1 takes what is
//! read of the id only from this map's flights, in the order they land: once one has landed, no
//! other flight of the id that was running then stores after it (it is *outrun*), and an
//! overtaken flight whose callers take what it read overtakes the current flight, which may
//! have read before it.
//!
//! An early refresh (XFetch) is a flight with no caller, started only when the id has none: so at
//! most one refresh per id runs in a process, and misses that arrive meanwhile join it.
//!
//! Loads of one id in one process are bounded: at most [`MAX_LOADS_PER_ID`] run at once (the
//! current flight and the overtaken ones). A flight that would exceed it stays queued until an
//! overtaken one lands, however many writes arrive.
//!
//! Every caller of a flight waits on the flight's one [`Cell`], whether its miss started the flight
//! (the leader), joined it through the owner or joined it on the board: a miss is answered at
//! once with the cell and whether it leads ([`Admitted`]), and each caller works out its own
//! origin from the one answer (`crate::handle::miss::follow`). A caller that drops its future drops only
//! its handle on the cell; the flight runs on for the others.
//!
//! The current flights are also listed on the table's [`Board`], where a miss joins without a
//! message to the owner: this map publishes a flight in the step that makes it current and
//! withdraws it in the step that ends that, so the board never lists anything else. It also
//! keeps the board's other half true: an id is marked as written while a write of it is running,
//! and a write, a push or a flush withdraws the reads that callers listed. A new owner inherits
//! the writes its crashed predecessor left running ([`Flights::inherit_write`]): they stay at the
//! head of their ids' queues until they land.
//!
//! A current flight with nothing else of its id in motion may land on its own task, through the
//! board (`crate::shard::owner::landings`): that is the landing [`Flights::land`] would give it
//! (`store`, no overtaking), made at once. So the board's mark of an id's overtaken flights
//! clears only once the owner has stored what the last of them keeps
//! ([`Flights::publish_detached`]), not when [`Flights::land`] removes it.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;

use ractor::RpcReplyPort;

use crate::error::Result;
use crate::fetched::Fetched;
use crate::state::board::{Answerer, Board, Cell};
pub(crate) use crate::state::flight_id::FlightId;
use id_state::{Current, IdState, Writes};

/// Loads of one id that may run at once in one process: the current flight and those overtaken by
/// writes. The bound holds however many `put`s, `invalidate`s or remote invalidations arrive.
pub(crate) const MAX_LOADS_PER_ID: usize = 2;

/// Where the owner sends what a miss was admitted to.
pub(crate) type Reply<V> = RpcReplyPort<Result<Admitted<V>>>;

/// What the owner answers a miss with, at once.
pub(crate) enum Admitted<V> {
    /// L1 held a fresh entry by the time the owner looked.
    Hit(Fetched<V>),
    /// The flight to wait on; `leads`: this miss started it (it sees the flight's own origin,
    /// where a joiner sees `Coalesced`).
    Flight { cell: Arc<Cell<V>>, leads: bool },
}

impl<V> Admitted<V> {
    /// A caller admitted to `cell`'s flight by `miss`.
    pub(crate) fn to(miss: &Miss, cell: Arc<Cell<V>>) -> Self {
        Admitted::Flight {
            cell,
            leads: !matches!(miss, Miss::Coalesced),
        }
    }
}

/// One load, and the cell its callers wait on.
pub(crate) struct Flight<V> {
    pub(crate) id: FlightId,
    /// Where every caller of the flight waits for its answer, listed on the board while the
    /// flight is current.
    cell: Answerer<V>,
    /// What it may do with what it read when it lands; only an overtaken flight ever leaves
    /// [`Standing::Keeps`].
    standing: Standing,
}

/// What a flight may do with what it read when it lands. A current flight keeps it (stores it in
/// L1 and answers it); each change that overtakes the flight, and each landing of another flight
/// of its id after that, moves it down, and only a new read moves it back up, from
/// `ReadBeforePush` alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// It stores what it read and answers it: current, or overtaken by a push and read again
    /// since.
    Keeps,
    /// A push for the id was handled since its last read began: what it read may be older than
    /// Valkey's value. It keeps again if it reads again (a polling loser).
    ReadBeforePush,
    /// An `invalidate` of this process overtook it, or another flight of the id landed after it
    /// was overtaken (storing or answering what may be newer): its callers take its answer, kept
    /// nowhere.
    AnswersOnly,
    /// A `put` of this process overtook it: L1 will hold the put's value, which may be older than
    /// what this flight reads (another process's later write, whose push may yet be lost). Its
    /// callers fly again rather than take an answer this process's L1 does not keep, so a
    /// process never reads back in time.
    FliesAgain,
}

impl Standing {
    /// Overtaken by `by`.
    fn overtaken(self, by: Overtaker) -> Self {
        match (self, by) {
            (Standing::FliesAgain, _) | (_, Overtaker::Write { replaces: true }) => {
                Standing::FliesAgain
            }
            (_, Overtaker::Write { replaces: false }) | (Standing::AnswersOnly, _) => {
                Standing::AnswersOnly
            }
            (Standing::Keeps | Standing::ReadBeforePush, Overtaker::Push) => {
                Standing::ReadBeforePush
            }
        }
    }

    /// It reads Valkey again: what it reads follows every push handled so far.
    fn read_again(self) -> Self {
        match self {
            Standing::ReadBeforePush => Standing::Keeps,
            other => other,
        }
    }

    /// Another flight of the id landed after it was overtaken.
    fn outrun(self) -> Self {
        match self {
            Standing::Keeps | Standing::ReadBeforePush => Standing::AnswersOnly,
            other => other,
        }
    }
}

/// What the owner does after a miss.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// The miss joined the id's current flight.
    Coalesced,
    /// The miss started a flight: launch it now.
    Launch(FlightId),
    /// The miss started a flight that must wait (a write is running, or the id is at its bound of
    /// loads); a later [`Flights::written`] or [`Flights::land`] launches it.
    Queued,
}

/// What the owner does after a write of an id landed on Valkey.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next<W> {
    /// Start this write, the next in line.
    Write(W),
    /// No write is left: launch the flight that waited for them.
    Launch(FlightId),
    /// Nothing waits.
    Idle,
}

/// A flight that landed, as the owner must treat it.
pub(crate) struct Landed<V> {
    pub(crate) flight: Flight<V>,
    /// `true` if its value may be stored in L1: it was still the id's current flight, or it was
    /// detached by a push and read Valkey again after it. `false`: answer its waiters only.
    pub(crate) store: bool,
    /// `true` if its callers fly again instead of taking its value: a put of this process
    /// overtook it ([`Standing::FliesAgain`]).
    pub(crate) fly_again: bool,
    /// A queued flight of the same id that may launch now.
    pub(crate) launch: Option<FlightId>,
    /// It had been overtaken: if its callers take what it read, the id's current flight, which
    /// may have read before it, is overtaken too (the owner's part, `owner::landings`).
    pub(crate) detached: bool,
}

/// What overtook a running flight.
#[derive(Debug, Clone, Copy)]
enum Overtaker {
    /// Another process's change (a push, or a flush).
    Push,
    /// This process's `put` (`replaces`) or `invalidate`.
    Write { replaces: bool },
}

/// Every flight and pending write of one table. `W` is the owner's pending write.
pub(crate) struct Flights<K, V, W> {
    /// Each id with anything in flight, and all of it ([`IdState`]).
    ids: HashMap<K, IdState<V, W>>,
    /// Where the current flights are listed for misses to join.
    board: Arc<Board<K, V>>,
}

impl<K: Eq + Hash + Clone, V, W> Flights<K, V, W> {
    /// An empty map that lists its current flights on `board` (which a new owner clears of its
    /// ids first: its flights start from none).
    pub(crate) fn new(board: Arc<Board<K, V>>) -> Self {
        Flights {
            ids: HashMap::new(),
            board,
        }
    }

    /// A caller missed L1 for `id`: it joins the current flight, or starts one; either way it
    /// waits on the cell returned.
    pub(crate) fn miss(&mut self, id: &K) -> (Miss, Arc<Cell<V>>) {
        let state = self.ids.entry(id.clone()).or_insert_with(IdState::new);
        if let Some(flight) = state.current() {
            return (Miss::Coalesced, flight.cell.take());
        }
        let fid = FlightId::next();
        let flight = Flight::new(fid);
        let cell = flight.cell.take();
        self.board.publish(id.clone(), fid, &flight.cell);
        state.current = Current::Queued(flight);
        let miss = match state.try_launch() {
            Some(fid) => Miss::Launch(fid),
            None => Miss::Queued,
        };
        (miss, cell)
    }

    /// An early refresh of `id`: a flight with no caller, started only if the id has no flight
    /// and it may launch at once (no write of the id running, the id within its bound of loads).
    /// `None`: nothing started; whatever is in flight for the id will do.
    pub(crate) fn refresh(&mut self, id: &K) -> Option<FlightId> {
        let state = self.ids.entry(id.clone()).or_insert_with(IdState::new);
        if state.current().is_some() || !state.may_load() {
            if state.is_idle() {
                self.ids.remove(id);
            }
            return None;
        }
        let fid = FlightId::next();
        let flight = Flight::new(fid);
        self.board.publish(id.clone(), fid, &flight.cell);
        state.current = Current::Loading(flight);
        Some(fid)
    }

    /// The value of `id` changed elsewhere (a push): a running flight may have read the old
    /// bytes, so it is detached and keeps nothing unless it reads again (a polling loser does). A
    /// queued flight has read nothing: it stays.
    pub(crate) fn overtake(&mut self, id: &K) {
        self.board.overtake_read(id);
        self.detach(id, Overtaker::Push);
    }

    /// Every running flight is overtaken (coherence lost: any of them may have read old bytes).
    pub(crate) fn overtake_all(&mut self) {
        self.board.overtake_reads();
        let ids: Vec<K> = self.ids.keys().cloned().collect();
        for id in &ids {
            self.detach(id, Overtaker::Push);
        }
    }

    /// Detaches `id`'s running flight and marks every detached flight of `id` as having read
    /// before this change ([`Standing::overtaken`]; this process's own write is never undone).
    fn detach(&mut self, id: &K, by: Overtaker) {
        let Some(state) = self.ids.get_mut(id) else {
            return;
        };
        if let Some(flight) = state.take_loading() {
            self.board.withdraw(id, &flight.cell);
            state.detached.push(flight);
            self.board.detached(id, true);
        }
        for flight in &mut state.detached {
            flight.standing = flight.standing.overtaken(by);
        }
    }

    /// The flight `fid` of `id` is about to read Valkey again: whatever it reads now follows
    /// every push handled so far.
    pub(crate) fn reading(&mut self, id: &K, fid: FlightId) {
        if let Some(flight) = self.ids.get_mut(id).and_then(|s| s.detached_mut(fid)) {
            flight.standing = flight.standing.read_again();
        }
    }

    /// Removes the flight `fid` of `id`, which finished. `None`: not ours any more.
    pub(crate) fn land(&mut self, id: &K, fid: FlightId) -> Option<Landed<V>> {
        let state = self.ids.get_mut(id)?;
        let landed = match state.take_current(fid) {
            Some(flight) => {
                self.board.withdraw(id, &flight.cell);
                Landed {
                    flight,
                    store: true,
                    fly_again: false,
                    launch: None,
                    detached: false,
                }
            }
            None => {
                // The board's mark stays until the owner has stored what this flight keeps
                // ([`Flights::publish_detached`]): no read, and no flight on its own task, lands
                // in L1 before that store.
                let flight = state.remove_detached(fid)?;
                Landed {
                    store: flight.standing == Standing::Keeps,
                    fly_again: flight.standing == Standing::FliesAgain,
                    flight,
                    launch: state.try_launch(),
                    detached: true,
                }
            }
        };
        // What it read may be newer than what the id's other flights read: none of them may
        // store after it.
        for other in &mut state.detached {
            other.standing = other.standing.outrun();
        }
        if state.is_idle() {
            self.ids.remove(id);
        }
        Some(landed)
    }

    /// Tells the board whether an overtaken flight of `id` still runs. The owner calls it once it
    /// has done with a landing (stored what the flight keeps, answered its callers): until then
    /// the board starts no read of the id and lands no flight of it on the flight's own task, so
    /// neither stores in L1 before the landing that may be older.
    pub(crate) fn publish_detached(&self, id: &K) {
        let running = self.ids.get(id).is_some_and(|s| !s.detached.is_empty());
        self.board.detached(id, running);
    }

    /// Flights running or queued, current and detached.
    pub(crate) fn len(&self) -> usize {
        let flights = |s: &IdState<V, W>| s.detached.len() + usize::from(s.current().is_some());
        self.ids.values().map(flights).sum()
    }
}

mod flight;
mod id_state;
#[cfg(test)]
mod tests;
mod write_queue;
