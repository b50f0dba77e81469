//! One flight: its name, the cell its callers wait on, and what it may do with what it read when
//! it lands (its [`Standing`], moved down by every change that overtakes it).

use std::time::Instant;

use crate::error::Result;
use crate::fetched::Fetched;
use crate::state::board::Answerer;
use crate::state::flight_id::FlightId;

/// One load, and the cell its callers wait on.
pub(crate) struct Flight<V> {
    pub(crate) id: FlightId,
    /// Where every caller of the flight waits for its answer; a miss that finds the flight
    /// current on the board joins it here.
    pub(crate) cell: Answerer<V>,
    /// What it may do with what it read when it lands; only an overtaken flight ever leaves
    /// [`Standing::Keeps`].
    pub(crate) standing: Standing,
}

/// What a flight may do with what it read when it lands. A current flight keeps it (stores it in
/// L1 and answers it); each change that overtakes the flight, and each landing of another flight
/// of its id after that, moves it down, and only a new read moves it back up, from
/// `ReadBeforePush` alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
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

/// What overtook a running flight.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Overtaker {
    /// Another process's change (a push, or a flush).
    Push,
    /// This process's `put` (`replaces`) or `invalidate`.
    Write { replaces: bool },
}

impl Standing {
    /// Overtaken by `by`.
    pub(crate) fn overtaken(self, by: Overtaker) -> Self {
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
    pub(crate) fn read_again(self) -> Self {
        match self {
            Standing::ReadBeforePush => Standing::Keeps,
            other => other,
        }
    }

    /// Another flight of the id landed after it was overtaken.
    pub(crate) fn outrun(self) -> Self {
        match self {
            Standing::Keeps | Standing::ReadBeforePush => Standing::AnswersOnly,
            other => other,
        }
    }
}

impl<V> Flight<V> {
    /// A new flight named `id`, with a fresh cell.
    pub(crate) fn new(id: FlightId) -> Self {
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
        self.cell.answer(None, None);
    }

    /// Sends the one answer to every caller, as the leader sees it (each caller works out its own
    /// origin). A flight answered early (soft timeout) keeps running for callers that join later.
    pub(crate) fn answer(&mut self, outcome: &Result<Fetched<V>>) {
        self.answer_before(outcome, None);
    }

    /// The cutoff of an answer given while this process is behind on its pushes (`vouched`
    /// false: `crate::coherence::vouch`): its first caller's seat. A caller who joined later may
    /// have begun after a write the flight read before, whose push has not overtaken the flight
    /// only because this process has not dealt with it yet; such callers fly again. (With the
    /// vouch holding, that push would have overtaken the flight before they could join it.)
    pub(crate) fn behind_cutoff(&self, vouched: bool) -> Option<Instant> {
        if vouched {
            return None;
        }
        self.cell.first_seated()
    }

    /// Sends the answer to the callers who joined by `cutoff` (every one: `None`); those who
    /// joined since fly again (the answer may be older than a write made before they joined).
    pub(crate) fn answer_before(&mut self, outcome: &Result<Fetched<V>>, cutoff: Option<Instant>) {
        self.cell.answer(Some(outcome.clone()), cutoff);
    }
}
