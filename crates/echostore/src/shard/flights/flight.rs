//! One flight's answer: the one its callers all wait for (early, too: a soft timeout's stale copy),
//! or none, when they fly again.

use super::*;

impl<V> Flight<V> {
    pub(super) fn new(id: FlightId) -> Self {
        Flight {
            id,
            cell: Answerer::new(),
            standing: Standing::Keeps,
        }
    }

    /// How many callers took the flight's cell (those who gave up since included).
    pub(crate) fn waiters(&self) -> usize {
        self.cell.joined()
    }

    /// Tells every caller to fly again: the flight changed nothing they may take. The flight is
    /// gone.
    pub(crate) fn fly_again(self) {
        self.cell.answer(None);
    }

    /// Sends the one answer to every caller, as the leader sees it (each caller works out its own
    /// origin). A flight answered early (soft timeout) keeps running for callers that join later.
    pub(crate) fn answer(&mut self, outcome: &Result<Fetched<V>>) {
        self.cell.answer(Some(outcome.clone()));
    }
}

impl<K: Eq + Hash + Clone, V, W> Flights<K, V, W> {
    /// The flight `fid` of `id` (current or detached) answers its waiters so far with `answer`
    /// and runs on for callers who join later (a soft timeout's stale copy).
    pub(crate) fn answer_early(&mut self, id: &K, fid: FlightId, answer: Fetched<V>) {
        let board = Arc::clone(&self.board);
        let Some(state) = self.ids.get_mut(id) else {
            return;
        };
        let current = state.current().is_some_and(|f| f.id == fid);
        let flight = if current {
            state.current_mut()
        } else {
            state.detached_mut(fid)
        };
        // Its final answer already given (it landed on its own task while this early one was on
        // its way): nothing is left to answer early, and no fresh cell may outlive the flight.
        let Some(flight) = flight.filter(|f| !f.cell.answered()) else {
            return;
        };
        // The fresh cell is listed before the old one is answered, so that a caller joining in
        // between waits for the load, as one who joins after the early answer does.
        let fresh = Answerer::new();
        if current {
            board.publish(id.clone(), fid, &fresh);
        }
        flight.answer(&Ok(answer));
        flight.cell = fresh;
    }
}
