//! How a flight lands: on its own task when it is still its id's current flight (its entry into
//! L1, its leaving the id's state and its answer, under the board's lock, with no hop through
//! the owner), else through the owner: what enters L1, what its callers are answered, when they
//! fly again instead (the flight changed nothing they may take), and the flight queued behind it.

use super::*;

/// Lands `flight` of `id` on its own task if it filled a value L1 keeps and the board says it
/// may: still the id's current flight, with nothing else of the id in motion. That is the landing
/// the owner would make of it at that instant (a current flight stores what it may keep and
/// answers what it read), and the owner changes the board before L1, so every later change of
/// the id undoes the entry as it would the owner's. `None` then says it is done (the owner
/// hears nothing of it); any other outcome is returned untouched, for the owner to land.
pub(super) fn land_on_own_task<K: Key, V: Value>(
    core: &TableCore<K, V>,
    id: &K,
    flight: FlightId,
    outcome: Result<Landing<V>>,
) -> Option<Result<Landing<V>>> {
    // Only a value L1 keeps: a caller who joins the flight after its answer then takes what an
    // L1 hit would give it. An answer L1 keeps nowhere (a default, a stale copy) is the owner's
    // to land, so that no later miss joins it.
    let Ok(Landing::Filled(mut filled)) = outcome else {
        return Some(outcome);
    };
    if filled.keep.is_none() {
        return Some(Ok(Landing::Filled(filled)));
    }
    let (mut keep, fingerprint) = (filled.keep.take(), filled.fingerprint);
    // A key whose `Hash` or `Eq` panics is left to the owner, which meets the same panic in its
    // flights map, crashes and answers the callers `Stopped`; this task must not die unreported.
    let landed = std::panic::catch_unwind(AssertUnwindSafe(|| {
        core.board(id).land_current(id, flight, |state| {
            if let Some(entry) = keep.take() {
                core.keep_in(state, id.clone(), entry, fingerprint);
            }
        })
    }));
    match landed.ok().flatten() {
        Some(mut flight) => {
            let cutoff = flight.behind_cutoff(core.vouch.holds());
            flight.answer_before(&Ok(filled.fetched), cutoff);
            None
        }
        None => {
            filled.keep = keep;
            Some(Ok(Landing::Filled(filled)))
        }
    }
}

impl<K: Key, V: Value> OwnerState<K, V> {
    /// A flight finished: store what it may keep, answer its callers (or send them to fly
    /// again), and launch the flight queued behind it; only then may the id's other flights and
    /// reads land in L1 again (nothing else lands in L1 before this landing).
    pub(super) fn landed(
        &mut self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        id: &K,
        flight: FlightId,
        refresh: bool,
        outcome: Result<Landing<V>>,
    ) {
        self.land(myself, id, flight, refresh, outcome);
        self.flights.landing_done(id);
    }

    fn land(
        &mut self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        id: &K,
        flight: FlightId,
        refresh: bool,
        outcome: Result<Landing<V>>,
    ) {
        let Some(mut landed) = self.flights.land(id, flight) else {
            if refresh && outcome.is_err() {
                bump(&self.core.stats.counters.early_refresh_failures);
            }
            return;
        };
        // A fenced-out load answers only the callers who joined before its hold was asked for.
        let cutoff = match &outcome {
            Ok(Landing::Filled(filled)) => filled.cutoff,
            _ => None,
        };
        let answer = match outcome {
            // Nothing its callers may take (another process is rebuilding the id, or a write
            // elsewhere fenced the load out and left nothing to answer): they fly again.
            Ok(Landing::FlyAgain) => return self.fly_again(myself, id, landed),
            // A put of this process overtook the flight: L1 keeps the put's value, so callers
            // take that (or what follows it) instead of what the flight read.
            Ok(Landing::Filled(_)) if landed.fly_again => {
                return self.fly_again(myself, id, landed);
            }
            Ok(Landing::Filled(filled)) if landed.store => Ok(match filled.keep {
                Some(entry) => {
                    self.core.keep(id.clone(), entry, filled.fingerprint);
                    self.answered_own(id, &landed, filled.fetched)
                }
                None => self.kept_nowhere(id, &landed, filled),
            }),
            // Overtaken (a push, a flush, a mark) or outrun: what it read is kept nowhere, and
            // what L1 holds came after the change that overtook it. Its callers take L1's entry
            // if there is one: answering a value L1 does not hold could put L1 behind what this
            // process has answered, and its next read would go back.
            Ok(Landing::Filled(filled)) => Ok(match self.l1_hit(id) {
                Some(hit) => hit,
                None => {
                    // Read before the change that overtook it: no stand-in for what came after.
                    self.retire_stand_in(id, &filled.fetched, None);
                    self.answered_own(id, &landed, filled.fetched)
                }
            }),
            Err(e) => Err(self.load_failed(id, refresh, &landed, e)),
        };
        self.answer_callers(id, &mut landed, &answer, cutoff);
        self.launch_next(myself, id, landed);
    }

    /// Answers a landed flight's callers who joined by `cutoff` (every one: `None`), and, while
    /// this process is behind on its pushes, only the one who started it
    /// ([`Flight::behind_cutoff`](crate::state::board::Flight::behind_cutoff)).
    fn answer_callers(
        &self,
        id: &K,
        landed: &mut Landed<V>,
        answer: &Result<Fetched<V>>,
        cutoff: Option<std::time::Instant>,
    ) {
        tracing::debug!(
            table = %self.core.name,
            id = ?id,
            outcome = match answer { Ok(f) => format!("{:?}", f.origin), Err(e) => e.to_string() },
            waiters = landed.flight.waiters(),
            stored = landed.store,
            "flight landed"
        );
        let behind = landed.flight.behind_cutoff(self.core.vouch.holds());
        landed
            .flight
            .answer_before(answer, earliest(cutoff, behind));
    }

    /// The flight queued behind a landed one launches, if one may.
    fn launch_next(&mut self, myself: &ActorRef<OwnerMsg<K, V>>, id: &K, landed: Landed<V>) {
        if let Some(queued) = landed.launch {
            self.launch_queued(myself, id.clone(), queued);
        }
    }

    /// A flight failed with `e`: counted (an early refresh's failure apart, logged: the current
    /// value stays until its freshness ends), unless it is an id the batch loader left out, which
    /// is an answer ("no such row"), not a fault: L1's copy goes then, if the flight may store.
    fn load_failed(&self, id: &K, refresh: bool, landed: &Landed<V>, e: Error) -> Error {
        let (counters, waiters) = (&self.core.stats.counters, landed.flight.waiters());
        if e.is_absent() && landed.store {
            self.forget_gone(id);
        }
        if refresh && !e.is_absent() {
            bump(&counters.early_refresh_failures);
            tracing::warn!(table = %self.core.name, id = ?id, error = %e, "early refresh failed: the current value stays until its freshness ends");
        }
        if (!refresh || waiters > 0) && !e.is_absent() {
            bump(&counters.errors);
        }
        e
    }

    /// What the callers of a current flight take when L1 keeps nothing of what it read (its
    /// write fenced out or superseded, or a stale copy): L1's fresh entry of the id if there is
    /// one, for that is what this process's next hit answers, and the flight's row may be newer
    /// (a change whose push is still on its way dropped the lock): answered, it would be followed
    /// by the older hit. Else the row, with L1's older stand-in retired.
    fn kept_nowhere(&mut self, id: &K, landed: &Landed<V>, filled: Filled<V>) -> Fetched<V> {
        let read = matches!(
            filled.fetched.origin,
            Origin::Loaded | Origin::L2 | Origin::Stale
        );
        if read && let Some(hit) = self.l1_hit(id) {
            return hit;
        }
        self.retire_stand_in(id, &filled.fetched, filled.stand_in);
        self.answered_own(id, landed, filled.fetched)
    }

    /// The source said `id`'s row is gone ([`Error::Absent`]): L1's copy goes with it, a stale
    /// one (else a later failed load's fail-safe would serve the gone row) or an early refresh's
    /// current one, as the fill deleted Valkey's.
    fn forget_gone(&self, id: &K) {
        self.core.board(id).change_or_make(id.clone(), |state| {
            state.unconfirmed = None;
            self.core.l1.remove(id);
        });
    }

    /// The flight `flight` of `id` answers its callers so far before it lands (a soft timeout's
    /// or a spent budget's stale copy): as at a landing, L1's older stand-in goes first.
    pub(super) fn answer_early(&mut self, id: &K, flight: FlightId, answer: Fetched<V>) {
        self.retire_stand_in(id, &answer, None);
        self.flights.answer_early(id, flight, answer);
    }

    /// The callers are about to be answered `answer`, a value read just now (from Valkey or the
    /// source, or a stale copy on Valkey) that L1 keeps nowhere. L1's entry of `id`, if it is no
    /// longer fresh (expired, capped when coherence was lost, waiting for key tracking's
    /// confirmation) and is not the stale copy answered, may be older: served later as a stale
    /// copy (fail-safe, a soft timeout, a spent budget) it would take this process back in time,
    /// so it goes, with any confirmation it waits for, and `stand_in` (the answered copy, when
    /// it was Valkey's stale one) takes its place. Under the board's lock, so a read settling a
    /// fresh entry meanwhile keeps it.
    fn retire_stand_in(&self, id: &K, answer: &Fetched<V>, stand_in: Option<Entry<V>>) {
        if !matches!(answer.origin, Origin::Loaded | Origin::L2 | Origin::Stale) {
            return;
        }
        let l1 = &self.core.l1;
        self.core.board(id).change_or_make(id.clone(), |state| {
            let answered = |value: &Arc<V>| Arc::ptr_eq(value, &answer.value);
            if l1
                .get(id)
                .is_some_and(|e| e.is_fresh() || answered(&e.value))
            {
                return;
            }
            state.unconfirmed = None;
            match stand_in {
                Some(entry) => l1.insert(id.clone(), entry),
                None => l1.remove(id),
            }
        });
    }

    /// A flight's callers take what it read. If it had been overtaken, the id's current flight
    /// may have read before it (another process's write, whose push has not come yet, is on
    /// Valkey now): that flight is overtaken as by a push, so that no read which starts after
    /// this answer takes its older one (its callers, who joined before, still get it).
    fn answered_own(&mut self, id: &K, landed: &Landed<V>, answer: Fetched<V>) -> Fetched<V> {
        if landed.detached {
            self.flights.overtake(id);
        }
        answer
    }

    /// Every caller of a landed flight flies again (it changed nothing they may take: each misses
    /// once more through the owner), then the flight queued behind it launches.
    fn fly_again(&mut self, myself: &ActorRef<OwnerMsg<K, V>>, id: &K, mut landed: Landed<V>) {
        let queued = landed.launch.take();
        landed.flight.fly_again();
        if let Some(queued) = queued {
            self.launch_queued(myself, id.clone(), queued);
        }
    }
}

/// The earlier of two cutoffs (`None`: no cutoff).
fn earliest(
    a: Option<std::time::Instant>,
    b: Option<std::time::Instant>,
) -> Option<std::time::Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
