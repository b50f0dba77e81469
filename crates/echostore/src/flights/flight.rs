//! One flight's callers: the leader kept apart from the joiners, and the one answer they all get
//! (early, too: a soft timeout's stale copy).

use super::*;

impl<V> Flight<V> {
    pub(super) fn new(id: FlightId, leader: Option<Reply<V>>) -> Self {
        Flight {
            id,
            leader,
            waiters: Vec::new(),
            board: Answerer::new(),
            stale_read: false,
            overwritten: false,
            replaced: false,
        }
    }

    pub(super) fn join(&mut self, reply: Reply<V>) {
        if self.waiters.len() == self.waiters.capacity() {
            // About to grow: drop callers that gave up first (amortised O(1) per join).
            self.waiters.retain(|w| !w.is_closed());
        }
        self.waiters.push(reply);
    }

    /// How many callers are waiting (including those that gave up and have not been pruned;
    /// those who joined through the board count until it is answered).
    pub(crate) fn waiters(&self) -> usize {
        usize::from(self.leader.is_some()) + self.waiters.len() + self.board.joined()
    }

    /// Its callers who joined through the owner, the leader first, still listening or not; those
    /// who joined through the board are told to fly again. The flight is gone.
    pub(crate) fn into_callers(self) -> impl Iterator<Item = Reply<V>> {
        self.board.answer(None);
        self.leader.into_iter().chain(self.waiters)
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
        self.board.answer(Some(joined));
    }
}

impl<K: Eq + Hash + Clone, V, W> Flights<K, V, W> {
    /// The flight `fid` of `id` (current or detached) answers its waiters so far with `answer`
    /// and runs on for callers who join later (a soft timeout's stale copy).
    pub(crate) fn answer_early(&mut self, id: &K, fid: FlightId, answer: Fetched<V>) {
        let board = Arc::clone(&self.board);
        let (flight, current) = match self.ids.get_mut(id).and_then(|s| s.current.as_mut()) {
            Some((flight, _)) if flight.id == fid => (flight, true),
            _ => match self.detached.get_mut(&fid) {
                Some(flight) => (flight, false),
                None => return,
            },
        };
        // The fresh cell is listed before the old one is answered, so that a caller joining in
        // between waits for the load, as one who joins after the early answer does.
        let fresh = Answerer::new();
        if current {
            board.publish(id.clone(), &fresh);
        }
        flight.answer(&Ok(answer));
        flight.board = fresh;
    }
}
