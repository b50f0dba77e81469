//! The flights map: every transition of an id's state, made by the owner. The owner tells it what
//! happened; it answers what to do. The state itself is its shard's board's, one [`IdState`] per
//! id (`crate::state::board::id_state`, which lists every field and who changes it), so that
//! callers read it on their own tasks; every transition here runs under the board's lock.
//!
//! This is the Elixir owner's `flights` map made explicit, with moka's waiter states as the
//! model. An id's state holds, beside a caller's read and the running write tasks, these phases,
//! each an enum:
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
//! Loads of one id in one process are bounded: at most
//! [`MAX_LOADS_PER_ID`](crate::state::board::id_state::MAX_LOADS_PER_ID) run at once (the current
//! flight and the overtaken ones). A flight that would exceed it stays queued until an
//! overtaken one lands, however many writes arrive.
//!
//! Every caller of a flight waits on the flight's one [`Cell`](crate::state::board::Cell), whether its miss started the flight
//! (the leader), joined it through the owner or joined it on the board: a miss is answered at
//! once with the cell and whether it leads ([`Admitted`]), and each caller works out its own
//! origin from the one answer (`crate::handle::miss::follow`). A caller that drops its future drops only
//! its handle on the cell; the flight runs on for the others.
//!
//! A miss on the board joins the id's current flight without a message to the owner: the
//! current flight *is* what the board lists, so a flight is joinable from the step that makes it
//! current until the step that ends that, and never otherwise. A flight, a write, a push or a
//! flush withdraws the read a caller listed. A new owner inherits the writes its crashed
//! predecessor left running ([`Flights::inherit_write`]): they stay at the head of their ids'
//! queues until they land.
//!
//! A current flight with nothing else of its id in motion may land on its own task, through the
//! board (`crate::shard::owner::landings`): that is the landing [`Flights::land`] would give it
//! (`store`, no overtaking), made at once, and it leaves the id's state as it lands. So an
//! overtaken flight that [`Flights::land`] removes leaves its id marked as *landing* until the
//! owner has stored what it keeps ([`Flights::landing_done`]).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use ractor::RpcReplyPort;

use crate::error::Result;
use crate::fetched::Fetched;
use crate::state::board::{Board, Flight, IdState, Overtaker, Seat, Standing, Writes};
pub(crate) use crate::state::flight_id::FlightId;

/// Where the owner sends what a miss was admitted to.
pub(crate) type Reply<V> = RpcReplyPort<Result<Admitted<V>>>;

/// What the owner answers a miss with, at once.
pub(crate) enum Admitted<V> {
    /// L1 held a fresh entry by the time the owner looked.
    Hit(Fetched<V>),
    /// The flight to wait on; `leads`: this miss started it (it sees the flight's own origin,
    /// where a joiner sees `Coalesced`).
    Flight { cell: Seat<V>, leads: bool },
}

impl<V> Admitted<V> {
    /// A caller admitted to `cell`'s flight by `miss`.
    pub(crate) fn to(miss: &Miss, cell: Seat<V>) -> Self {
        Admitted::Flight {
            cell,
            leads: !matches!(miss, Miss::Coalesced),
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

/// The owner's hand on its shard's board: every transition of the ids' states, each under the
/// board's lock. `W` is the owner's pending write.
pub(crate) struct Flights<K, V, W> {
    /// Where the ids' states live, read by callers on their own tasks.
    board: Arc<Board<K, V, W>>,
    /// This owner's number on the board: dropping the map (the owner stops or crashes) clears
    /// what it held there, unless a newer owner has taken the board.
    owner: u64,
}

/// The ids' states, under the board's lock.
type Ids<'a, K, V, W> = std::sync::MutexGuard<'a, HashMap<K, IdState<V, W>>>;

/// Forgets `id` if nothing of it holds any more.
pub(crate) fn tidy<K: Eq + Hash, V, W>(ids: &mut HashMap<K, IdState<V, W>>, id: &K) {
    if ids.get(id).is_some_and(IdState::is_empty) {
        ids.remove(id);
    }
}

impl<K: Eq + Hash + Clone, V, W> Flights<K, V, W> {
    /// The map of a new owner of `board`, the actor `holder` (its pid; `None` in tests): what the
    /// owner before it held there is cleared (its flights start from none; the writes it left
    /// running stay).
    pub(crate) fn new(board: Arc<Board<K, V, W>>, holder: Option<u64>) -> Self {
        let owner = board.take_over(holder);
        Flights { board, owner }
    }

    /// The ids' states, under the board's lock.
    pub(crate) fn ids(&self) -> Ids<'_, K, V, W> {
        self.board.ids()
    }

    /// A caller missed L1 for `id`: it joins the current flight, or starts one; either way it
    /// waits on the cell returned.
    pub(crate) fn miss(&mut self, id: &K) -> (Miss, Seat<V>) {
        let mut ids = self.ids();
        let state = ids.entry(id.clone()).or_insert(IdState::NOTHING);
        if let Some(flight) = state.current() {
            return (Miss::Coalesced, flight.cell.take());
        }
        let flight = Flight::new(FlightId::next());
        let cell = flight.cell.take();
        state.start(flight, false);
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
        let mut ids = self.ids();
        let state = ids.entry(id.clone()).or_insert(IdState::NOTHING);
        if state.current().is_some() || !state.may_load() {
            tidy(&mut ids, id);
            return None;
        }
        let fid = FlightId::next();
        state.start(Flight::new(fid), true);
        Some(fid)
    }

    /// The value of `id` changed elsewhere (a push): a read listed is withdrawn, and a running
    /// flight may have read the old bytes, so it is detached and keeps nothing unless it reads
    /// again (a polling loser does). A queued flight has read nothing: it stays.
    pub(crate) fn overtake(&mut self, id: &K) {
        let mut ids = self.ids();
        if let Some(state) = ids.get_mut(id) {
            state.read = None;
            detach(state, Overtaker::Push);
        }
        tidy(&mut ids, id);
    }

    /// Every read is withdrawn and every running flight overtaken (coherence lost: any of them
    /// may have read old bytes).
    pub(crate) fn overtake_all(&mut self) {
        self.ids().retain(|_, state| {
            state.read = None;
            detach(state, Overtaker::Push);
            !state.is_empty()
        });
    }

    /// The flight `fid` of `id` is about to read Valkey again: whatever it reads now follows
    /// every push handled so far.
    pub(crate) fn reading(&mut self, id: &K, fid: FlightId) {
        if let Some(flight) = self.ids().get_mut(id).and_then(|s| s.detached_mut(fid)) {
            flight.standing = flight.standing.read_again();
        }
    }

    /// Removes the flight `fid` of `id`, which finished. `None`: not ours any more (it landed on
    /// its own task, or its owner died). The id stays marked as landing until
    /// [`landing_done`](Self::landing_done): no read, no flight on its own task and no caller's
    /// own admission acts on the id before the owner has stored what this one keeps.
    pub(crate) fn land(&mut self, id: &K, fid: FlightId) -> Option<Landed<V>> {
        let mut ids = self.ids();
        let state = ids.get_mut(id)?;
        let current = state.take_current(fid);
        if current.is_some() || state.detached_mut(fid).is_some() {
            state.landing = true;
        }
        let landed = match current {
            Some(flight) => Landed {
                flight,
                store: true,
                fly_again: false,
                launch: None,
                detached: false,
            },
            None => {
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
        tidy(&mut ids, id);
        Some(landed)
    }

    /// The owner is done with a landing of `id` (stored what the flight keeps, answered its
    /// callers): the id's other flights and reads may land in L1 again.
    pub(crate) fn landing_done(&self, id: &K) {
        let mut ids = self.ids();
        if let Some(state) = ids.get_mut(id) {
            state.landing = false;
        }
        tidy(&mut ids, id);
    }

    /// Flights running or queued, current and detached.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.board.flights()
    }
}

/// Detaches the running flight of `state` and marks every detached flight of its id as having
/// read before this change ([`Standing::overtaken`]; this process's own write is never undone).
fn detach<V, W>(state: &mut IdState<V, W>, by: Overtaker) {
    if let Some(flight) = state.take_loading() {
        state.detached.push(flight);
    }
    for flight in &mut state.detached {
        flight.standing = flight.standing.overtaken(by);
    }
}

impl<K, V, W> Drop for Flights<K, V, W> {
    fn drop(&mut self) {
        self.board.release(self.owner);
    }
}

mod answer_early;
#[cfg(test)]
mod tests;
mod write_queue;
