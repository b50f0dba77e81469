//! Everything this process holds of one id beyond L1's entry, as one value on its shard's board:
//! a caller's read, the flight a miss joins, the writes on their way to Valkey, the flights a
//! change overtook, the write tasks running, the own-write fingerprints, whether Valkey's copy is
//! unsettled, the entry awaiting key tracking's confirmation, and its losers' wake-ups. Each phase
//! is an enum, so a state the ordering rule rules out (writes waiting with none on the wire, a
//! read listed beside a flight) cannot be built. Every field is changed under the board's lock,
//! by:
//!
//! | field | what it holds | changed by |
//! | --- | --- | --- |
//! | `read` | a caller's read of Valkey, listed so that it may settle in L1 | the caller (lists, settles, withdraws); the owner (withdraws it before a flight, a write, a push or a flush) |
//! | `current` | the flight a miss joins: none, queued or loading | the owner (starts, launches, lands, detaches); the flight's own task (lands it, `Board::land_current`) |
//! | `writes` | none, or one on the wire with the rest waiting and whether a push overtook them | the owner |
//! | `detached` | flights a write or a change overtook, still running | the owner |
//! | `landing` | the owner is landing an overtaken flight and has not stored it yet | the owner |
//! | `running` | write tasks of the id running | each write's own task (`RunningWrite`) |
//! | `own` | this process's writes of the id whose pushes are its own (their fingerprints) | the owner (`crate::shard::own_writes`) |
//! | `unsettled` | a failed write or an in-process load left Valkey's copy behind, until repaired | the write's or the flight's own task (marks); a landed write, a repair (settles) — `crate::state::unsettled` |
//! | `unconfirmed` | under key tracking, the id's L1 entry at its full life, until Valkey confirms the bytes it was made from | whoever stores into L1 (`TableCore::keep`); the owner (confirms; forgets it with the entry when a landing answers a value L1 keeps nowhere); a flush or a cap (forgets); while set, the id is not quiet (a peek reads no Valkey copy) |
//! | `losers` | the wake-ups of this process's losers of the id, waiting for another process's write | a losing flight's own task (`TableCore::watch`); the tracking connection's task wakes them (a push of the id's value or lock key, or pushes missed) |
//!
//! The ordering rule these enforce is stated once, in `crate::shard::flights`: a fill never reads
//! back what a write is replacing, and a write that overtakes a fill wins. What outlives an owner
//! that crashes is `running` (a crashed owner's writes still land), `unsettled` (its failed write
//! still needs its repair), `unconfirmed` (L1's entry outlives it; the next owner takes its
//! confirmation) and `losers` (a crashed owner's flights still run to their end): a new owner
//! clears every other field of its shard's ids ([`Board::take_over`](super::Board::take_over)), as
//! an owner that goes does ([`Board::release`](super::Board::release)); the board itself is the
//! table's, not the owner's.
//! What key tracking's connection has read is the connection's, not the id's: the store's
//! tracking registry keeps it (`crate::coherence::tracking::keys`), by Valkey key, for every table.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use tokio::sync::Notify;

use super::ReadId;
use super::flight::Flight;
use crate::state::flight_id::FlightId;
use crate::state::l1::Entry;
use crate::valkey::envelope::Fingerprint;
use crate::wire::key::KeyNames;

/// Loads of one id that may run at once in one process: the current flight and those overtaken by
/// writes. The bound holds however many `put`s, `invalidate`s or remote invalidations arrive.
pub(crate) const MAX_LOADS_PER_ID: usize = 2;

/// Everything in motion for one id (the module's table says who changes what).
pub(crate) struct IdState<V, W> {
    /// A caller's read of Valkey, listed only while no flight is current.
    pub(crate) read: Option<ReadId>,
    /// The flight a miss of the id joins.
    pub(crate) current: Current<V>,
    /// The id's writes on their way to Valkey.
    pub(crate) writes: Writes<W>,
    /// Flights of the id that a write or a change overtook, still running (detached: no miss
    /// joins them, and what they read is kept only as the flights map's `land` says).
    pub(crate) detached: Vec<Flight<V>>,
    /// An overtaken flight has left `detached` and the owner has not stored what it keeps yet:
    /// nothing else of the id enters L1 before that store.
    pub(crate) landing: bool,
    /// Write tasks of the id running: counted by the tasks themselves, so that an owner's crash
    /// clears none of them.
    pub(crate) running: usize,
    /// This process's writes of the id whose coherence pushes are its own, as the fingerprints of
    /// their envelopes, oldest first; a push takes the oldest.
    pub(crate) own: VecDeque<Fingerprint>,
    /// Valkey's copy of the id may be behind what this process wrote or answered, until its
    /// repair lands (`crate::state::unsettled`).
    pub(crate) unsettled: Option<UnsettledMark>,
    /// Under key tracking, the id's L1 entry at its full life, waiting for Valkey to confirm the
    /// bytes (their fingerprint) it was made from; L1 holds it not fresh meanwhile, so reads
    /// miss and read Valkey (`crate::coherence::tracking::keys`). The latest entry of the id only.
    pub(crate) unconfirmed: Option<(Fingerprint, Entry<V>)>,
    /// The wake-ups of this process's losers of the id (a flight that lost the lock polls for
    /// another process's write): a push of the id's value or lock key wakes them at once. Each
    /// loser holds its own; one dropped is gone.
    pub(crate) losers: Vec<Weak<Notify>>,
}

/// What left an id's Valkey copy behind, and what its repair deletes.
#[derive(Clone)]
pub(crate) struct UnsettledMark {
    /// Which failure marked it (table-wide, rising): a repair that raced a newer failure of the
    /// id does not settle it.
    pub(crate) generation: u64,
    pub(crate) names: KeyNames,
    pub(crate) repair: Repair,
}

/// What made an id unsettled, which says what its repair deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repair {
    /// A `put` or `invalidate` that failed: the value and the lock, as the write would have.
    Write,
    /// A load answered in-process while Valkey could not be read, or whose write back failed:
    /// the value only, unless it shows `version` (the row's source version, with `.version_by`)
    /// or a later one: such a copy is not older than what this process answered, and deleting
    /// it would cost a source read nobody needs. `None` (no version, or a gone row): whatever
    /// it holds.
    Load { version: Option<u64> },
}

impl Repair {
    /// The repair that covers both this pending one and `next`: a write's stands (it drops the
    /// lock too); two loads' keeps only a copy recent enough for both.
    pub(crate) fn and(self, next: Repair) -> Repair {
        match (self, next) {
            (Repair::Write, _) | (_, Repair::Write) => Repair::Write,
            (Repair::Load { version: a }, Repair::Load { version: b }) => Repair::Load {
                version: a.zip(b).map(|(a, b)| a.max(b)),
            },
        }
    }
}

/// The phase of an id's current flight.
pub(crate) enum Current<V> {
    /// No flight: the next miss starts one.
    None,
    /// Started, not loading yet: a write of the id is on the wire, or the id is at its bound of
    /// loads. It has read nothing, so nothing overtakes it.
    Queued(Flight<V>),
    /// Loading (reading Valkey, holding the lock, calling the source).
    Loading(Flight<V>),
}

/// The phase of an id's writes.
pub(crate) enum Writes<W> {
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
    pub(crate) const NOTHING: IdState<V, W> = IdState {
        read: None,
        current: Current::None,
        writes: Writes::None,
        detached: Vec::new(),
        landing: false,
        running: 0,
        own: VecDeque::new(),
        unsettled: None,
        unconfirmed: None,
        losers: Vec::new(),
    };

    /// Nothing of the id holds: the board forgets it.
    pub(crate) fn is_empty(&self) -> bool {
        self.is_quiet()
            && self.own.is_empty()
            && self.unsettled.is_none()
            && self.losers.iter().all(|wake| wake.strong_count() == 0)
    }

    /// Nothing of the id is listed or in motion, and no L1 entry of it waits for key tracking's
    /// confirmation (which makes an older copy fresh again until the push of a later change
    /// lands): a copy read from Valkey now cannot be newer than what this process serves next.
    pub(crate) fn is_quiet(&self) -> bool {
        self.read.is_none()
            && self.current().is_none()
            && !self.in_motion()
            && self.unconfirmed.is_none()
    }

    /// A write of the id, or a flight the owner alone may land, is in motion: nothing of the id
    /// may enter L1 but through the owner.
    pub(crate) fn in_motion(&self) -> bool {
        self.writing() || !self.detached.is_empty() || self.landing || self.running > 0
    }

    /// Forgets what the owner holds of the id (a new owner starts with none of it); a running
    /// write task's count, an unsettled mark and an entry awaiting confirmation stay (L1's
    /// entry outlives the owner, and the next one takes its confirmation).
    pub(crate) fn clear_owned(&mut self) {
        self.read = None;
        self.current = Current::None;
        self.writes = Writes::None;
        self.detached.clear();
        self.landing = false;
        self.own.clear();
    }

    /// The current flight, queued or loading.
    pub(crate) fn current(&self) -> Option<&Flight<V>> {
        match &self.current {
            Current::None => None,
            Current::Queued(flight) | Current::Loading(flight) => Some(flight),
        }
    }

    /// The current flight, queued or loading, for changing.
    pub(crate) fn current_mut(&mut self) -> Option<&mut Flight<V>> {
        match &mut self.current {
            Current::None => None,
            Current::Queued(flight) | Current::Loading(flight) => Some(flight),
        }
    }

    /// Makes `flight` current, `loading` or queued; a read listed is withdrawn (the flight's
    /// answer is at least as new).
    pub(crate) fn start(&mut self, flight: Flight<V>, loading: bool) {
        self.read = None;
        self.current = if loading {
            Current::Loading(flight)
        } else {
            Current::Queued(flight)
        };
    }

    /// Ends the current flight, if it is `fid`.
    pub(crate) fn take_current(&mut self, fid: FlightId) -> Option<Flight<V>> {
        if self.current()?.id != fid {
            return None;
        }
        match std::mem::replace(&mut self.current, Current::None) {
            Current::Queued(flight) | Current::Loading(flight) => Some(flight),
            Current::None => None,
        }
    }

    /// Ends the current flight if it is loading: what it read may be older than a change.
    pub(crate) fn take_loading(&mut self) -> Option<Flight<V>> {
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
    pub(crate) fn writing(&self) -> bool {
        matches!(self.writes, Writes::OnTheWire { .. })
    }

    /// Whether a flight of the id may start loading now: no write of it on its way, and the id
    /// within its bound of loads.
    pub(crate) fn may_load(&self) -> bool {
        !self.writing() && self.detached.len() < MAX_LOADS_PER_ID
    }

    /// Moves a queued current flight to loading if nothing holds it back; its id if so.
    pub(crate) fn try_launch(&mut self) -> Option<FlightId> {
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
    pub(crate) fn detached_mut(&mut self, fid: FlightId) -> Option<&mut Flight<V>> {
        self.detached.iter_mut().find(|f| f.id == fid)
    }

    /// Removes the detached flight `fid`, which finished.
    pub(crate) fn remove_detached(&mut self, fid: FlightId) -> Option<Flight<V>> {
        let at = self.detached.iter().position(|f| f.id == fid)?;
        Some(self.detached.swap_remove(at))
    }

    /// The entry waiting for `fingerprint`'s confirmation, taken; `None` when a later entry
    /// replaced it (its own confirmation follows) or none waits.
    pub(crate) fn take_unconfirmed(&mut self, fingerprint: Fingerprint) -> Option<Entry<V>> {
        match &self.unconfirmed {
            Some((waits_for, _)) if *waits_for == fingerprint => {
                self.unconfirmed.take().map(|(_, full)| full)
            }
            _ => None,
        }
    }

    /// `wake` is a loser's of the id, until it drops it.
    pub(crate) fn watch(&mut self, wake: &Arc<Notify>) {
        self.losers.retain(|held| held.strong_count() > 0);
        self.losers.push(Arc::downgrade(wake));
    }

    /// Wakes the id's losers (a push said its keys changed, or pushes were missed).
    pub(crate) fn wake_losers(&mut self) {
        self.losers.retain(|held| match held.upgrade() {
            Some(wake) => {
                wake.notify_one();
                true
            }
            None => false,
        });
    }

    /// The read listed, if it is `read` (any read, with `None`).
    pub(crate) fn lists_read(&self, read: Option<ReadId>) -> bool {
        matches!(self.read, Some(r) if read.is_none_or(|read| r == read))
    }
}

impl<W> Writes<W> {
    /// One write on its way, none waiting, nothing overtaken yet.
    pub(crate) fn on_the_wire() -> Self {
        Writes::OnTheWire {
            waiting: VecDeque::new(),
            overtaken: false,
        }
    }

    /// Another process's change came: the writes on their way, if any, keep nothing.
    pub(crate) fn overtake(&mut self) {
        if let Writes::OnTheWire { overtaken, .. } = self {
            *overtaken = true;
        }
    }
}
