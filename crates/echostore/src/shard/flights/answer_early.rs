//! A flight's early answer (a soft timeout's stale copy): its callers so far take it, and the
//! flight runs on for those who join later.

use super::*;
use crate::state::board::Answerer;

impl<K: Eq + Hash + Clone, V, W> Flights<K, V, W> {
    /// The flight `fid` of `id` (current or detached) answers its waiters so far with `answer`
    /// and runs on for callers who join later (a soft timeout's stale copy).
    pub(crate) fn answer_early(&mut self, id: &K, fid: FlightId, answer: Fetched<V>) {
        let mut ids = self.ids();
        let Some(state) = ids.get_mut(id) else {
            return;
        };
        let flight = if state.current().is_some_and(|f| f.id == fid) {
            state.current_mut()
        } else {
            state.detached_mut(fid)
        };
        // Its final answer already given (it landed on its own task while this early one was on
        // its way): nothing is left to answer early, and no fresh cell may outlive the flight.
        let Some(flight) = flight.filter(|f| !f.cell.answered()) else {
            return;
        };
        // Under the board's lock: a caller joins either the old cell before its early answer or
        // the fresh one, which waits for the load.
        let early = std::mem::replace(&mut flight.cell, Answerer::new());
        early.answer(Some(Ok(answer)), None);
    }
}
