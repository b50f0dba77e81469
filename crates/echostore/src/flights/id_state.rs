//! What is in flight for one id: its current flight and phase, whether a write of it is on
//! the wire, the writes waiting behind it and whether a change overtook them, and its detached
//! flights.

use super::*;

/// Everything in flight for one id.
pub(super) struct IdState<V, W> {
    pub(super) current: Option<(Flight<V>, Phase)>,
    /// `true` while a write of this id is on its way to Valkey.
    pub(super) writing: bool,
    /// Writes waiting for the running one, in arrival order.
    pub(super) waiting: VecDeque<W>,
    /// Another process's change (a push, a flush, a mark) came while this id's writes were on
    /// their way: Valkey may hold the other value, so the last of them keeps nothing in L1.
    pub(super) overtaken: bool,
    /// Detached flights of this id still running.
    pub(super) detached: Vec<FlightId>,
}

impl<V, W> IdState<V, W> {
    pub(super) fn new() -> Self {
        IdState {
            current: None,
            writing: false,
            waiting: VecDeque::new(),
            overtaken: false,
            detached: Vec::new(),
        }
    }

    pub(super) fn is_idle(&self) -> bool {
        self.current.is_none() && !self.writing && self.detached.is_empty()
    }

    /// Moves a queued current flight to running if nothing holds it back; its id if so.
    pub(super) fn try_launch(&mut self) -> Option<FlightId> {
        if self.writing || self.detached.len() >= MAX_LOADS_PER_ID {
            return None;
        }
        match &mut self.current {
            Some((flight, phase @ Phase::Queued)) => {
                *phase = Phase::Running;
                Some(flight.id)
            }
            _ => None,
        }
    }
}
