//! The flights map: at most one load per id, and the callers waiting on it.
//!
//! This is the Elixir owner's `flights` map made explicit. A miss either *leads* a new flight or
//! *joins* the one already running for its id. Each flight carries a [`FlightId`], so that only its
//! own completion removes it: when a `put` or `invalidate` overtakes a flight, the flight is
//! *detached* — it still answers its own waiters when it lands, but a new miss on the id starts a
//! fresh flight and the detached one's value is not stored.
//!
//! A caller that drops its future leaves its reply port in the list; the flight runs on for the
//! others, and closed ports are skipped when answering (and pruned whenever the list would grow).

use std::collections::HashMap;
use std::hash::Hash;

use ractor::RpcReplyPort;

use crate::error::Result;
use crate::fetched::Fetched;

/// Where a caller's answer is sent.
pub(crate) type Reply<V> = RpcReplyPort<Result<Fetched<V>>>;

/// Names one flight, so a late completion cannot finish a newer flight for the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FlightId(u64);

/// One load and the callers waiting for it.
pub(crate) struct Flight<V> {
    pub(crate) id: FlightId,
    /// The caller whose miss started the flight, until it is answered. Kept apart from the
    /// joiners, so that pruning callers who gave up, or answering early, never turns a joiner
    /// into the leader (and its `Coalesced` into the flight's own origin).
    leader: Option<Reply<V>>,
    /// The callers who joined it.
    waiters: Vec<Reply<V>>,
    /// `false` while the flight waits for a `put`/`invalidate` of its id to reach Valkey.
    pub(crate) launched: bool,
}

impl<V> Flight<V> {
    /// How many callers are waiting (including those that gave up and have not been pruned).
    pub(crate) fn waiters(&self) -> usize {
        usize::from(self.leader.is_some()) + self.waiters.len()
    }

    /// Sends the one answer to every waiter still listening, and forgets them: the leader sees the
    /// flight's origin, the joiners see `Coalesced` (stale and default answers keep their origin).
    /// A flight answered early (soft timeout) keeps running for callers that join later.
    pub(crate) fn answer(&mut self, outcome: &Result<Fetched<V>>) {
        if let Some(leader) = self.leader.take()
            && !leader.is_closed()
        {
            let _ = leader.send(outcome.clone());
        }
        let joined = match outcome {
            Ok(fetched) => Ok(fetched.for_joiner()),
            Err(e) => Err(e.clone()),
        };
        for waiter in std::mem::take(&mut self.waiters) {
            if !waiter.is_closed() {
                let _ = waiter.send(joined.clone());
            }
        }
    }
}

/// What a miss did.
pub(crate) enum Joined {
    /// It started a new flight; the caller must launch it (or queue it).
    Led(FlightId),
    /// It joined a flight already running.
    Coalesced,
}

/// Every flight of one table.
pub(crate) struct Flights<K, V> {
    current: HashMap<K, Flight<V>>,
    detached: HashMap<FlightId, Flight<V>>,
    next: u64,
}

impl<K: Eq + Hash + Clone, V> Flights<K, V> {
    pub(crate) fn new() -> Self {
        Flights {
            current: HashMap::new(),
            detached: HashMap::new(),
            next: 0,
        }
    }

    /// Adds a waiter for `id`: to the current flight, or to a new one.
    pub(crate) fn join(&mut self, id: &K, reply: Reply<V>) -> Joined {
        if let Some(flight) = self.current.get_mut(id) {
            if flight.waiters.len() == flight.waiters.capacity() {
                // About to grow: drop callers that gave up first (amortised O(1) per join).
                flight.waiters.retain(|w| !w.is_closed());
            }
            flight.waiters.push(reply);
            return Joined::Coalesced;
        }
        self.next += 1;
        let fid = FlightId(self.next);
        self.current.insert(
            id.clone(),
            Flight {
                id: fid,
                leader: Some(reply),
                waiters: Vec::new(),
                launched: false,
            },
        );
        Joined::Led(fid)
    }

    /// The current flight for `id`, if any.
    pub(crate) fn current_mut(&mut self, id: &K) -> Option<&mut Flight<V>> {
        self.current.get_mut(id)
    }

    /// The flight `fid` of `id`, current or detached, without removing it.
    pub(crate) fn get_mut(&mut self, id: &K, fid: FlightId) -> Option<&mut Flight<V>> {
        match self.current.get_mut(id) {
            Some(flight) if flight.id == fid => Some(flight),
            _ => self.detached.get_mut(&fid),
        }
    }

    /// A `put` or `invalidate` overtook the flight for `id`: it keeps its waiters but stops being
    /// the id's current flight, and its value will not be stored. A flight still queued behind a
    /// Valkey write has read nothing yet, so it stays current: it launches after the new write and
    /// reads what that write left.
    pub(crate) fn detach(&mut self, id: &K) {
        if self.current.get(id).is_some_and(|f| f.launched)
            && let Some(flight) = self.current.remove(id)
        {
            self.detached.insert(flight.id, flight);
        }
    }

    /// Removes the flight that just landed. The flag says whether it was still current (its value
    /// may be stored) or detached (answer only). `None`: not ours any more (already answered).
    pub(crate) fn land(&mut self, id: &K, fid: FlightId) -> Option<(Flight<V>, bool)> {
        if self.current.get(id).is_some_and(|f| f.id == fid) {
            return self.current.remove(id).map(|f| (f, true));
        }
        self.detached.remove(&fid).map(|f| (f, false))
    }

    /// Flights running or queued, current and detached.
    pub(crate) fn len(&self) -> usize {
        self.current.len() + self.detached.len()
    }
}
