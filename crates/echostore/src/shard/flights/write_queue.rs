//! The writes of an id in the flights map: their queue (one on its way to Valkey, the rest
//! waiting in arrival order, a write a crashed owner left running at its head), what they do to
//! the id's flights, and whether another process's change overtook them.

use super::*;

impl<K: Eq + Hash + Clone, V, W> Flights<K, V, W> {
    /// A `put` (`replaces`) or `invalidate` of `id`: it withdraws a read listed, overtakes a
    /// running flight, and goes to Valkey now (returned) or after the writes ahead of it
    /// (queued).
    pub(crate) fn write(&mut self, id: &K, write: W, replaces: bool) -> Option<W> {
        let mut ids = self.ids();
        let state = ids.entry(id.clone()).or_insert(IdState::NOTHING);
        state.read = None;
        detach(state, Overtaker::Write { replaces });
        match &mut state.writes {
            Writes::OnTheWire { waiting, .. } => {
                waiting.push_back(write);
                None
            }
            Writes::None => {
                state.writes = Writes::on_the_wire();
                Some(write)
            }
        }
    }

    /// A write of `id` that an owner before this one started is still running: the id's flights
    /// and writes queue behind it as behind one of this owner's, until [`written`](Self::written).
    pub(crate) fn inherit_write(&mut self, id: &K) {
        let mut ids = self.ids();
        let state = ids.entry(id.clone()).or_insert(IdState::NOTHING);
        state.read = None;
        if !state.writing() {
            state.writes = Writes::on_the_wire();
        }
    }

    /// Another process's change of `id` came (a push): the writes of it on their way keep
    /// nothing in L1 when they land.
    pub(crate) fn overtake_write(&mut self, id: &K) {
        if let Some(state) = self.ids().get_mut(id) {
            state.writes.overtake();
        }
    }

    /// Every id's writes on their way are overtaken (a flush, a clear or a tag invalidation).
    pub(crate) fn overtake_writes(&mut self) {
        for state in self.ids().values_mut() {
            state.writes.overtake();
        }
    }

    /// The running write of `id` has landed: whether its entry may enter L1 — no later write of
    /// the id waits, and no other process's change overtook the writes since the id was last
    /// idle. (An overtaking change covers every write queued when it came: its mark stays until
    /// the last of them lands.) Asked before [`written`](Self::written), which ends the id's
    /// writes.
    pub(crate) fn landing_keeps(&mut self, id: &K) -> bool {
        match self.ids().get_mut(id).map(|s| &mut s.writes) {
            Some(Writes::OnTheWire { waiting, overtaken }) => {
                waiting.is_empty() && !std::mem::take(overtaken)
            }
            _ => true,
        }
    }

    /// The running write of `id` landed on Valkey: the next write starts, else a queued flight.
    pub(crate) fn written(&mut self, id: &K) -> Next<W> {
        let mut ids = self.ids();
        let Some(state) = ids.get_mut(id) else {
            return Next::Idle;
        };
        if let Writes::OnTheWire { waiting, .. } = &mut state.writes
            && let Some(write) = waiting.pop_front()
        {
            return Next::Write(write);
        }
        state.writes = Writes::None;
        let next = match state.try_launch() {
            Some(fid) => Next::Launch(fid),
            None => Next::Idle,
        };
        tidy(&mut ids, id);
        next
    }
}
