//! How the owner runs the Valkey writes of `put` and `invalidate`, and takes coherence pushes.
//!
//! L1 follows what reached Valkey: a `put` or `invalidate` drops the id from L1 at once, and a
//! put's entry enters L1 only when its write has landed, no later write of the id is waiting, and
//! no other process's change of the id was pushed while it was on the wire. So a write that fails,
//! is superseded, or is lost with a crashed owner never leaves L1 holding what Valkey does not.
//! (Without a Valkey, L1 is the only copy and changes at once.) A push (`Invalidated`) that may
//! be this process's own write is checked by reading the value back; any other drops the id from
//! L1 and detaches a running flight; `Flush` (pushes missed) drops all of L1. A restarted owner
//! queues behind the writes its predecessor left running (`crate::state::board`'s `RunningWrite`).

use super::*;

impl<K: Key, V: Value> OwnerState<K, V> {
    /// A `put` (with its entry) or an `invalidate`: L1 drops the id now; the Valkey write goes
    /// behind any other write of the id. Without Valkey, L1 takes the entry at once.
    pub(super) fn write(
        &mut self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        id: K,
        entry: Option<Entry<V>>,
        write: Option<L2Write>,
        reply: RpcReplyPort<Result<Stamp>>,
    ) {
        let Some(write) = write else {
            self.flights.overtake(&id);
            match entry {
                Some(entry) => self.core.l1.insert(id, entry),
                None => self.core.l1.remove(&id),
            }
            let _ = reply.send(Ok(None));
            return;
        };
        let replaces = entry.is_some();
        let pending = PendingWrite {
            write,
            entry,
            reply,
        };
        // The board's reads of the id are withdrawn before L1 changes: none can put back what
        // the write replaces.
        let now = self.flights.write(&id, pending, replaces);
        self.core.l1.remove(&id);
        if let Some(now) = now {
            self.spawn_write(myself, id, now);
        }
    }

    pub(super) fn spawn_write(
        &mut self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        id: K,
        pending: PendingWrite<V>,
    ) {
        let written_as = pending.fingerprint();
        if let Some(fingerprint) = written_as {
            self.own.expect(&self.flights, &id, fingerprint);
        }
        let running = self.core.board(&id).running_write(id.clone());
        let (core, myself) = (Arc::clone(&self.core), myself.clone());
        let write = async move {
            let entry = pending.apply(&core, &id).await;
            drop(running);
            let _ = myself.cast(OwnerMsg::Written {
                id,
                entry,
                written_as,
            });
        };
        tokio::spawn(self.core.under_way(write));
    }

    /// The writes a crashed owner left running land with nobody to take them: each stays at the
    /// head of its id's queue here, and its landing is this owner's `Written` with no entry (what
    /// it wrote is read back from Valkey, never assumed).
    pub(super) fn inherit_writes(&mut self, myself: &ActorRef<OwnerMsg<K, V>>) {
        let board = self.core.boards.shard(self.shard);
        for id in board.running_writes() {
            self.flights.inherit_write(&id);
            let (board, myself) = (Arc::clone(board), myself.clone());
            tokio::spawn(async move {
                board.landed(&id).await;
                let _ = myself.cast(OwnerMsg::Written {
                    id,
                    entry: None,
                    written_as: None,
                });
            });
        }
    }

    /// The write at the head of `id`'s queue landed: keep its entry unless a later write of the id
    /// waits, then start that write, or the flight queued behind them.
    pub(super) fn written(
        &mut self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        id: K,
        entry: Option<Entry<V>>,
        written_as: Option<Fingerprint>,
    ) {
        // L1 takes the entry while the id is still marked as written on the board: a read that
        // finds the mark gone finds the entry (the caller may already have its answer and read).
        match (entry, written_as) {
            (Some(entry), _) if self.flights.landing_keeps(&id) => {
                self.core.keep(id.clone(), entry, written_as);
            }
            // Refused (a newer value there, too late) or failed: no push of it will come.
            (None, Some(fingerprint)) => self.own.withdraw(&self.flights, &id, fingerprint),
            _ => {}
        }
        match self.flights.written(&id) {
            Next::Write(next) => self.spawn_write(myself, id, next),
            Next::Launch(flight) => self.launch_queued(myself, id, flight),
            Next::Idle => {}
        }
    }

    /// A push says `id` changed on Valkey. If it may be this process's own write, read the value
    /// back first (off the owner) and compare fingerprints; otherwise drop the id from L1 and
    /// detach a running flight.
    pub(super) fn invalidated(&mut self, myself: &ActorRef<OwnerMsg<K, V>>, id: K, checked: bool) {
        if !checked
            && let Some(mine) = self.own.take(&self.flights, &id)
            && let Some(l2) = self.core.l2.clone()
            && let Ok(names) = self.core.names(&id)
        {
            let (myself, max) = (myself.clone(), self.core.config.max_value_bytes);
            tokio::spawn(async move {
                if !matches!(l2.fingerprint(&names, max).await, Ok(Some(now)) if now == mine) {
                    let _ = myself.cast(OwnerMsg::Invalidated { id, checked: true });
                }
            });
            return;
        }
        self.flights.overtake(&id); // before L1 changes: a read of the id can no longer settle
        self.core.l1.remove(&id);
        self.flights.overtake_write(&id);
        // Counted once done: whoever sees the count finds the id already gone from L1.
        bump(&self.core.stats.counters.invalidations);
        let pushed =
            crate::shard::owner::owner_ref::invalidated(crate::events::InvalidatedBy::Push);
        self.core.events.emit_owned(id, pushed);
    }

    /// A read with `at_least` found L1's copy of `id` possibly older than it must see: the copy
    /// goes, and a running flight (which may have read before the write the read must see) is
    /// overtaken, so the read's miss reads Valkey or the source afresh.
    pub(super) fn behind(&mut self, id: &K, reply: RpcReplyPort<Result<()>>) {
        self.flights.overtake(id); // before L1 changes: a read of the id can no longer settle
        self.core.l1.remove(id);
        // As a push: a write of this process still on its way may be older than what the read
        // is about to find on Valkey, so its landing keeps nothing in L1.
        self.flights.overtake_write(id);
        let _ = reply.send(Ok(()));
    }

    /// Key tracking read `id`'s value key for the L1 entry made from `fingerprint`'s bytes. Found
    /// there, the entry lives its full life: Valkey pushes every later change of the key. Changed,
    /// it is out of date, as if pushed. Either way only while that entry is still the latest of
    /// the id (a later one waits for its own read).
    pub(super) fn confirmed(
        &mut self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        id: K,
        fingerprint: Fingerprint,
        found: Found,
    ) {
        let (core, mut changed) = (&self.core, false);
        // Under the board's lock, where the entry waits, so that no read settles between the look
        // and the insert (L1 never goes back from what a read just stored), and no cap
        // (`TableCore::cap_l1`, which drops every waiting entry) comes between the take and the
        // insert of the full life.
        core.board(&id).change(&id, |state| {
            let Some(full) = state.take_unconfirmed(fingerprint) else {
                return;
            };
            match found {
                Found::Held => {
                    if core
                        .l1
                        .get(&id)
                        .is_some_and(|e| Arc::ptr_eq(&e.value, &full.value))
                    {
                        core.l1.insert(id.clone(), full);
                    }
                }
                Found::Changed => changed = true,
                Found::Unknown => {}
            }
        });
        if changed {
            self.invalidated(myself, id, true);
        }
    }
}
