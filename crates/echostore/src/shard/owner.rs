//! The table's owner: one ractor actor per shard of the table's ids (`.shards(n)`, see
//! [`owner_ref`]), the Elixir table's GenServer.
//!
//! The owner serialises everything that must be ordered per id of its shard — misses, puts,
//! invalidations and the flights' landings — and never awaits I/O or the loader. It asks the
//! flights map ([`crate::shard::flights`], where the per-id ordering rule lives) what each event
//! means, and does it: a flight runs as a spawned task (the owner's, or that of a caller that
//! admitted its miss on the board) that reports back with [`OwnerMsg::Landed`] unless it landed
//! on its own task (still current and alone, as the board tells it: stored, answered and gone);
//! a Valkey write runs as a spawned task that reports back with [`OwnerMsg::Written`].
//!
//! L1 follows what reached Valkey (writes and coherence pushes: `owner/ordered_writes.rs`; a flight's
//! landing, and its callers flying again: `owner/landings.rs`; clears and tag invalidations:
//! `owner/marked.rs`); an early
//! refresh is a flight with no caller; with tracking down, see [`TableCore::keepable`].

use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::Instrument;

use crate::clock::Moment;
use crate::coherence::tracking::keys::Found;
use crate::error::{Error, Result};
use crate::fetched::{Fetched, Origin};
use crate::flight::fill::Fill;
use crate::flight::l2_write::{L2Write, PendingWrite, Stamp};
use crate::shard::flights::{Admitted, FlightId, Flights, Landed, Miss, Next, Reply};
use crate::shard::own_writes::OwnWrites;
use crate::shard::owner::owner_ref::EveryShard;
use crate::state::core::TableCore;
use crate::state::l1::{Entry, L1Cache};
use crate::state::loser_policy::LoserPolicy;
use crate::state::marks::Scope;
use crate::state::stale::{Filled, Landing, Signal};
use crate::state::stats::bump;
use crate::valkey::envelope::Fingerprint;
use crate::wire::key::{Key, Value};

/// What the owner is asked to do.
pub(crate) enum OwnerMsg<K, V> {
    /// A caller missed L1 (the Elixir `{:fill, id}`); `losers`: its own loser policy for a
    /// flight it starts (`ReadOptions::losers`); `read`: it has just read Valkey and found no
    /// fresh copy (a flight it starts need not read the value before the lock attempt).
    Fill {
        id: K,
        reply: Reply<V>,
        losers: Option<LoserPolicy<Arc<V>>>,
        read: bool,
    },
    /// A batch read's misses of this shard, each with its caller's reply; the flights they start
    /// join the rest of the batch's in `gather`.
    FillMany {
        misses: Vec<(K, Reply<V>)>,
        gather: Arc<Gather<K, V>>,
    },
    /// A hit on `value` drew an early refresh of `id` (XFetch); nobody waits for it.
    Refresh { id: K, value: Arc<V> },
    /// A flight answers its waiters before it ends (the soft timeout's stale copy).
    Early {
        id: K,
        flight: FlightId,
        answer: Fetched<V>,
    },
    /// A losing flight is about to read Valkey again.
    Reading { id: K, flight: FlightId },
    /// A flight is about to write an envelope with this fingerprint (its push will be our own).
    Writing { id: K, fingerprint: Fingerprint },
    /// That write did not store its envelope, or failed: no push of it is to be expected.
    NotWritten { id: K, fingerprint: Fingerprint },
    /// A flight finished, and did not land on its own task; `refresh`: it was an early refresh.
    Landed {
        id: K,
        flight: FlightId,
        refresh: bool,
        outcome: Result<Landing<V>>,
    },
    /// Store `entry` for `id` (L1 once `write`, if any, has reached Valkey).
    Put {
        id: K,
        entry: Entry<V>,
        write: Option<L2Write>,
        reply: RpcReplyPort<Result<Stamp>>,
    },
    /// Drop `id` from L1 now, then from Valkey (if any).
    Invalidate {
        id: K,
        write: Option<L2Write>,
        reply: RpcReplyPort<Result<Stamp>>,
    },
    /// The Valkey write at the head of `id`'s queue finished; `entry` is what it leaves in L1,
    /// `written_as` the fingerprint of the envelope it wrote.
    Written {
        id: K,
        entry: Option<Entry<V>>,
        written_as: Option<Fingerprint>,
    },
    /// Valkey pushed an invalidation of `id`'s value key (coherence); `checked`: it was read
    /// back and is not this process's own write.
    Invalidated { id: K, checked: bool },
    /// A read that must see at least a version could not tell that L1's copy of `id` is that
    /// recent: drop it and overtake a running flight, as a push would; `reply` once done.
    Behind {
        id: K,
        reply: RpcReplyPort<Result<()>>,
    },
    /// Key tracking read `id`'s value key for the L1 entry made from `fingerprint`'s bytes.
    Confirmed {
        id: K,
        fingerprint: Fingerprint,
        found: Found,
    },
    /// Invalidations may have been missed (coherence lost or regained): drop all of L1. Every
    /// shard gets one; the table counts the flush once the last has been handled ([`EveryShard`]).
    Flush(Arc<EveryShard<K, V>>),
    /// A clear or a tag invalidation is known here now (`crate::state::marks`): drop what it makes
    /// stale; `reply`, if any, once done.
    Marked {
        scope: Scope,
        reply: Option<RpcReplyPort<Result<()>>>,
        counted: Arc<EveryShard<K, V>>,
    },
    /// A tracking connection was lost: every running flight is overtaken, and L1 keeps its
    /// entries briefly (the last shard's share caps it, [`EveryShard::cap`]).
    Cap(Arc<EveryShard<K, V>>),
    /// Answered once every message sent to this owner before it has been handled: what the
    /// pushes routed so far changed is out of L1 (the vouch waits for it, docs/coherence.md).
    CaughtUp(RpcReplyPort<Result<()>>),
    /// This owner replaced one that crashed: every id is unknown (see `owner_ref.rs`).
    Restarted,
}

mod batches;
mod landings;
mod launches;
mod marked;
mod ordered_writes;
pub(crate) mod owner_ref;
mod schema_lease;

pub(crate) use batches::Gather;
use landings::land_on_own_task;
pub(crate) use launches::{Start, launch_fill};
pub(crate) use marked::poll_marks;
pub(crate) use schema_lease::keep_schema;

/// The owner's behaviour; its state is [`OwnerState`].
pub(crate) struct Owner<K, V>(PhantomData<fn() -> (K, V)>);

impl<K, V> Owner<K, V> {
    pub(crate) fn new() -> Self {
        Owner(PhantomData)
    }
}

/// What an owner starts with: the table's shared state, and which of its shards it owns.
pub(crate) struct OwnerArgs<K, V> {
    pub(crate) core: Arc<TableCore<K, V>>,
    pub(crate) shard: usize,
}

/// Everything the owner keeps between messages.
pub(crate) struct OwnerState<K, V> {
    core: Arc<TableCore<K, V>>,
    /// The shard this owner owns: the ids whose hash falls in it (`owner_ref::shard_of`).
    shard: usize,
    flights: Flights<K, V, PendingWrite<V>>,
    /// Writes of this process whose pushes are its own.
    own: OwnWrites,
}

impl<K: Key, V: Value> Actor for Owner<K, V> {
    type Msg = OwnerMsg<K, V>;
    type State = OwnerState<K, V>;
    type Arguments = OwnerArgs<K, V>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        OwnerArgs { core, shard }: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        // A restarted owner starts with no flights: taking its shard's board over clears what the
        // dead one held there (its flights' callers are answered `Stopped`).
        let tracking = core
            .tracker
            .as_ref()
            .map_or_else(Default::default, |t| t.mode());
        let mut state = OwnerState {
            flights: Flights::new(
                Arc::clone(core.boards.shard(shard)),
                Some(myself.get_id().pid()),
            ),
            own: OwnWrites::new(tracking),
            core,
            shard,
        };
        state.inherit_writes(&myself);
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            OwnerMsg::Fill {
                id,
                reply,
                losers,
                read,
            } => state.fill(&myself, id, reply, losers, read),
            OwnerMsg::FillMany { misses, gather } => state.fill_many(&myself, misses, gather),
            OwnerMsg::Refresh { id, value } => state.refresh(&myself, id, &value),
            OwnerMsg::Early { id, flight, answer } => state.answer_early(&id, flight, answer),
            OwnerMsg::Landed {
                id,
                flight,
                refresh,
                outcome,
            } => state.landed(&myself, &id, flight, refresh, outcome),
            OwnerMsg::Put {
                id,
                entry,
                write,
                reply,
            } => state.write(&myself, id, Some(entry), write, reply),
            OwnerMsg::Invalidate { id, write, reply } => {
                state.write(&myself, id, None, write, reply)
            }
            OwnerMsg::Written {
                id,
                entry,
                written_as,
            } => state.written(&myself, id, entry, written_as),
            OwnerMsg::Confirmed {
                id,
                fingerprint,
                found,
            } => state.confirmed(&myself, id, fingerprint, found),
            OwnerMsg::Reading { id, flight } => state.flights.reading(&id, flight),
            OwnerMsg::Writing { id, fingerprint } => state.writing(&id, fingerprint),
            OwnerMsg::NotWritten { id, fingerprint } => state.not_written(&id, fingerprint),
            OwnerMsg::Invalidated { id, checked } => state.invalidated(&myself, id, checked),
            OwnerMsg::Behind { id, reply } => state.behind(&id, reply),
            OwnerMsg::Flush(flushed) => state.flushed(&myself, flushed),
            OwnerMsg::Cap(capped) => state.overtake_for_cap(capped),
            OwnerMsg::Marked {
                scope,
                reply,
                counted,
            } => state.took_mark(&scope, reply, counted),
            OwnerMsg::Restarted => state.restarted(&myself),
            OwnerMsg::CaughtUp(reply) => _ = reply.send(Ok(())),
        }
        Ok(())
    }
}

impl<K: Key, V: Value> OwnerState<K, V> {
    /// A flight of `id` is about to write an envelope with `fingerprint`: its push is this
    /// process's own.
    fn writing(&self, id: &K, fingerprint: Fingerprint) {
        self.own.expect(&self.flights, id, fingerprint);
    }

    /// That write of `id` stored nothing, or failed: no push of it is to be expected.
    fn not_written(&self, id: &K, fingerprint: Fingerprint) {
        self.own.withdraw(&self.flights, id, fingerprint);
    }

    /// A fresh L1 entry for `id`, counted as a hit.
    fn l1_hit(&self, id: &K) -> Option<Fetched<V>> {
        let entry = self.core.l1.get(id).filter(|e| self.core.trusts(e))?;
        self.core.stats.l1_hits.incr();
        Some(Fetched::new(entry.value, Origin::L1))
    }

    fn fill(
        &mut self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        id: K,
        reply: Reply<V>,
        losers: Option<LoserPolicy<Arc<V>>>,
        read: bool,
    ) {
        // The race may have been won between the caller's miss and this message.
        if let Some(hit) = self.l1_hit(&id) {
            let _ = reply.send(Ok(Admitted::Hit(hit)));
            return;
        }
        let (miss, cell) = self.flights.miss(&id);
        let _ = reply.send(Ok(Admitted::to(&miss, cell)));
        match miss {
            Miss::Coalesced => {}
            Miss::Launch(flight) => {
                let start = Start {
                    losers,
                    read,
                    ..Start::default()
                };
                self.launch(myself, id, flight, start);
            }
            Miss::Queued => {}
        }
    }

    /// A hit drew an early refresh of `id` on `value`. Only for the entry that drew it (a write,
    /// an invalidation or a fill since may have replaced it): the entry is marked so that later
    /// hits draw no more, and the refresh starts as the id's one flight unless one is already
    /// on its way.
    fn refresh(&mut self, myself: &ActorRef<OwnerMsg<K, V>>, id: K, value: &Arc<V>) {
        let Some(entry) = self.core.l1.get(&id) else {
            return;
        };
        if !Arc::ptr_eq(&entry.value, value) || !entry.refreshes_early() || !entry.is_fresh() {
            return;
        }
        let until = entry.fresh_until();
        // Under the board's lock, and only over the entry that drew the refresh, as it is now: a
        // flight that lands on its own task may have stored a newer one since the look above,
        // and a cap (`TableCore::cap_l1`) may have shortened its life.
        let (l1, drew) = (&self.core.l1, entry.value);
        self.core.board(&id).exclusive(|| {
            if let Some(now) = l1.get(&id)
                && Arc::ptr_eq(&now.value, &drew)
            {
                l1.insert(id.clone(), now.refresh_asked());
            }
        });
        if let Some(flight) = self.flights.refresh(&id) {
            bump(&self.core.stats.counters.early_refreshes);
            let start = Start {
                refreshing: Some(until),
                ..Start::default()
            };
            self.launch(myself, id, flight, start);
        }
    }

    /// Starts a flight that was queued, unless the write it waited for left a fresh L1 entry.
    fn launch_queued(&mut self, myself: &ActorRef<OwnerMsg<K, V>>, id: K, flight: FlightId) {
        if let Some(hit) = self.l1_hit(&id)
            && let Some(mut landed) = self.flights.land(&id, flight)
        {
            landed.flight.answer(&Ok(hit));
            self.flights.landing_done(&id);
            return;
        }
        self.launch(myself, id, flight, Start::default());
    }
}
