//! What is in flight for one id, as one value: the phase of the flight a miss joins (none,
//! queued, loading), the phase of its writes (none, or one on the wire with the rest waiting
//! behind it and whether another process's change overtook them), and the flights that a write
//! or a change overtook, still running. Each phase is an enum, so a state the ordering rule rules
//! out (writes waiting with none on the wire, an overtaken mark with no write) cannot be built.
//!
//! Two per-id facts live elsewhere, on purpose: a caller's own read of the id and the marks of
//! the writes on the wire are on the table's board (`crate::state::board`), because callers consult
//! them on their own tasks, and a write's mark must outlive an owner that crashes; a flight's
//! callers wait on its cell, which is here, inside the flight.

use super::*;

/// Everything in flight for one id.
pub(super) struct IdState<V, W> {
    /// The flight a miss of the id joins.
    pub(super) current: Current<V>,
    /// The id's writes on their way to Valkey.
    pub(super) writes: Writes<W>,
    /// Flights of the id that a write or a change overtook, still running (detached: no miss
    /// joins them, and what they read is kept only as [`Flights::land`] says).
    pub(super) detached: Vec<Flight<V>>,
}

/// The phase of an id's current flight.
pub(super) enum Current<V> {
    /// No flight: the next miss starts one.
    None,
    /// Started, not loading yet: a write of the id is on the wire, or the id is at its bound of
    /// loads. It has read nothing, so nothing overtakes it.
    Queued(Flight<V>),
    /// Loading (reading Valkey, holding the lock, calling the source).
    Loading(Flight<V>),
}

/// The phase of an id's writes.
pub(super) enum Writes<W> {
    /// None on its way.
    None,
    /// One on its way to Valkey (this owner's, or one a crashed owner left running), the others
    /// waiting in arrival order; `overtaken`: another process's change came meanwhile, so Valkey
    /// may hold the other value and the last of them keeps nothing in L1.
    OnTheWire {
        waiting: VecDeque<W>,
        overtaken: bool,
    },
}

impl<V, W> IdState<V, W> {
    pub(super) fn new() -> Self {
        IdState {
            current: Current::None,
            writes: Writes::None,
            detached: Vec::new(),
        }
    }

    pub(super) fn is_idle(&self) -> bool {
        matches!(self.current, Current::None)
            && matches!(self.writes, Writes::None)
            && self.detached.is_empty()
    }

    /// The current flight, queued or loading.
    pub(super) fn current(&self) -> Option<&Flight<V>> {
        match &self.current {
            Current::None => None,
            Current::Queued(flight) | Current::Loading(flight) => Some(flight),
        }
    }

    /// The current flight, queued or loading, for changing.
    pub(super) fn current_mut(&mut self) -> Option<&mut Flight<V>> {
        match &mut self.current {
            Current::None => None,
            Current::Queued(flight) | Current::Loading(flight) => Some(flight),
        }
    }

    /// Ends the current flight, if it is `fid`.
    pub(super) fn take_current(&mut self, fid: FlightId) -> Option<Flight<V>> {
        if self.current()?.id != fid {
            return None;
        }
        match std::mem::replace(&mut self.current, Current::None) {
            Current::Queued(flight) | Current::Loading(flight) => Some(flight),
            Current::None => None,
        }
    }

    /// Ends the current flight if it is loading: what it read may be older than a change.
    pub(super) fn take_loading(&mut self) -> Option<Flight<V>> {
        if !matches!(self.current, Current::Loading(_)) {
            return None;
        }
        match std::mem::replace(&mut self.current, Current::None) {
            Current::Loading(flight) => Some(flight),
            other => {
                self.current = other;
                None
            }
        }
    }

    /// Whether a write of the id is on its way.
    pub(super) fn writing(&self) -> bool {
        matches!(self.writes, Writes::OnTheWire { .. })
    }

    /// Whether a flight of the id may start loading now: no write of it on its way, and the id
    /// within its bound of loads.
    pub(super) fn may_load(&self) -> bool {
        !self.writing() && self.detached.len() < MAX_LOADS_PER_ID
    }

    /// Moves a queued current flight to loading if nothing holds it back; its id if so.
    pub(super) fn try_launch(&mut self) -> Option<FlightId> {
        if !self.may_load() || !matches!(self.current, Current::Queued(_)) {
            return None;
        }
        match std::mem::replace(&mut self.current, Current::None) {
            Current::Queued(flight) => {
                let fid = flight.id;
                self.current = Current::Loading(flight);
                Some(fid)
            }
            other => {
                self.current = other;
                None
            }
        }
    }

    /// The detached flight `fid`, for changing.
    pub(super) fn detached_mut(&mut self, fid: FlightId) -> Option<&mut Flight<V>> {
        self.detached.iter_mut().find(|f| f.id == fid)
    }

    /// Removes the detached flight `fid`, which finished.
    pub(super) fn remove_detached(&mut self, fid: FlightId) -> Option<Flight<V>> {
        let at = self.detached.iter().position(|f| f.id == fid)?;
        Some(self.detached.swap_remove(at))
    }
}
