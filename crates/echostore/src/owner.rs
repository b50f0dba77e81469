//! The table's owner: one ractor actor per table, the Elixir table's GenServer.
//!
//! The owner serialises everything that must be ordered per id — misses, puts and invalidations —
//! and never awaits I/O or the loader: a new flight runs as a spawned task that reports back with
//! [`OwnerMsg::Landed`]; a `put`/`invalidate` updates L1 at once and sends its Valkey write to a
//! spawned task that reports back with [`OwnerMsg::Written`]. Writes to one id reach Valkey one at
//! a time, in arrival order, and a miss that arrives while such a write is pending waits for it
//! (its flight is queued), so a fill can never read back the value an invalidation is deleting.

use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::fetched::{Fetched, Origin};
use crate::fill::{self, Filled};
use crate::flights::{FlightId, Flights, Joined, Reply};
use crate::key::{Key, KeyNames, Value};
use crate::l1::{Entry, L1Cache};
use crate::stats::bump;
use crate::table::TableCore;

/// A write to Valkey that a `put` or `invalidate` asked for.
pub(crate) enum L2Write {
    /// Set the value (envelope, physical life in ms) and drop the lock.
    Put {
        names: KeyNames,
        envelope: Vec<u8>,
        px: u64,
    },
    /// Delete the value and the lock.
    Invalidate { names: KeyNames },
}

/// What the owner is asked to do.
pub(crate) enum OwnerMsg<K, V> {
    /// A caller missed L1 (the Elixir `{:fill, id}`).
    Fill { id: K, reply: Reply<V> },
    /// A flight answers its waiters before it ends (the soft timeout's stale copy).
    Early {
        id: K,
        flight: FlightId,
        answer: Fetched<V>,
    },
    /// A flight finished.
    Landed {
        id: K,
        flight: FlightId,
        outcome: Result<Filled<V>>,
    },
    /// Store `entry` for `id` in L1 now, then write it to Valkey (if any).
    Put {
        id: K,
        entry: Entry<V>,
        write: Option<L2Write>,
        reply: RpcReplyPort<Result<()>>,
    },
    /// Drop `id` from L1 now, then from Valkey (if any).
    Invalidate {
        id: K,
        write: Option<L2Write>,
        reply: RpcReplyPort<Result<()>>,
    },
    /// A Valkey write for `id` finished.
    Written { id: K },
}

/// The owner's behaviour; its state is [`OwnerState`].
pub(crate) struct Owner<K, V>(PhantomData<fn() -> (K, V)>);

impl<K, V> Owner<K, V> {
    pub(crate) fn new() -> Self {
        Owner(PhantomData)
    }
}

/// A write waiting for the one ahead of it on the same id.
struct PendingWrite {
    write: L2Write,
    reply: RpcReplyPort<Result<()>>,
}

/// Everything the owner keeps between messages.
pub(crate) struct OwnerState<K, V> {
    core: Arc<TableCore<K, V>>,
    flights: Flights<K, V>,
    /// Ids with a Valkey write running; the queue holds the writes waiting behind it.
    writes: HashMap<K, VecDeque<PendingWrite>>,
}

impl<K: Key, V: Value> Actor for Owner<K, V> {
    type Msg = OwnerMsg<K, V>;
    type State = OwnerState<K, V>;
    type Arguments = Arc<TableCore<K, V>>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        core: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        // A restarted owner starts with no flights: the dead one's waiters were answered `Stopped`.
        core.stats.in_flight.store(0, Relaxed);
        Ok(OwnerState {
            core,
            flights: Flights::new(),
            writes: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            OwnerMsg::Fill { id, reply } => state.fill(&myself, id, reply),
            OwnerMsg::Early { id, flight, answer } => {
                if let Some(flight) = state.flights.get_mut(&id, flight) {
                    flight.answer(&Ok(answer));
                }
            }
            OwnerMsg::Landed {
                id,
                flight,
                outcome,
            } => state.landed(&id, flight, outcome),
            OwnerMsg::Put {
                id,
                entry,
                write,
                reply,
            } => {
                state.core.l1.insert(id.clone(), entry);
                state.flights.detach(&id);
                state.write(&myself, id, write, reply);
            }
            OwnerMsg::Invalidate { id, write, reply } => {
                state.core.l1.remove(&id);
                state.flights.detach(&id);
                state.write(&myself, id, write, reply);
            }
            OwnerMsg::Written { id } => state.written(&myself, id),
        }
        state.publish_in_flight();
        Ok(())
    }
}

impl<K: Key, V: Value> OwnerState<K, V> {
    /// Updates the `in_flight` gauge; called before answering, so a caller that got its answer
    /// never sees its own flight still counted.
    fn publish_in_flight(&self) {
        self.core
            .stats
            .in_flight
            .store(self.flights.len() as u64, Relaxed);
    }

    fn fill(&mut self, myself: &ActorRef<OwnerMsg<K, V>>, id: K, reply: Reply<V>) {
        // The race may have been won between the caller's miss and this message.
        if let Some(entry) = self.core.l1.get(&id)
            && entry.is_fresh()
        {
            self.core.stats.l1_hits.incr();
            if !reply.is_closed() {
                let _ = reply.send(Ok(Fetched::new(entry.value, Origin::L1)));
            }
            return;
        }
        match self.flights.join(&id, reply) {
            Joined::Coalesced => bump(&self.core.stats.counters.coalesced),
            Joined::Led(flight) => {
                if !self.writes.contains_key(&id) {
                    self.launch(myself, id, flight);
                }
                // Otherwise it is queued: `written` launches it once Valkey has the write.
            }
        }
    }

    /// Starts a flight as a task of its own; the owner goes on serving.
    fn launch(&mut self, myself: &ActorRef<OwnerMsg<K, V>>, id: K, flight: FlightId) {
        if let Some(f) = self.flights.current_mut(&id) {
            f.launched = true;
        }
        let core = Arc::clone(&self.core);
        let myself = myself.clone();
        let span = tracing::debug_span!("fill", table = %core.name, id = ?id);
        tokio::spawn(
            async move {
                let early = {
                    let myself = myself.clone();
                    let id = id.clone();
                    move |answer| {
                        let id = id.clone();
                        let _ = myself.cast(OwnerMsg::Early { id, flight, answer });
                    }
                };
                let outcome = AssertUnwindSafe(fill::fill(&core, &id, &early))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| Err(Error::LoaderPanicked("the fill panicked".into())));
                // If the owner is gone, its waiters were already answered `Stopped`.
                let _ = myself.cast(OwnerMsg::Landed {
                    id,
                    flight,
                    outcome,
                });
            }
            .instrument(span),
        );
    }

    fn landed(&mut self, id: &K, flight: FlightId, outcome: Result<Filled<V>>) {
        let Some((mut flight, current)) = self.flights.land(id, flight) else {
            return;
        };
        self.publish_in_flight();
        let answer = match outcome {
            Ok(filled) => {
                if current && let Some(entry) = filled.keep {
                    self.core.l1.insert(id.clone(), entry);
                }
                Ok(filled.fetched)
            }
            Err(e) => {
                bump(&self.core.stats.counters.errors);
                Err(e)
            }
        };
        tracing::debug!(
            table = %self.core.name,
            id = ?id,
            outcome = match &answer { Ok(f) => format!("{:?}", f.origin), Err(e) => e.to_string() },
            waiters = flight.waiters(),
            stored = current,
            "flight landed"
        );
        flight.answer(&answer);
    }

    /// Queues a Valkey write behind any other write to the same id (none without Valkey).
    fn write(
        &mut self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        id: K,
        write: Option<L2Write>,
        reply: RpcReplyPort<Result<()>>,
    ) {
        let Some(write) = write else {
            let _ = reply.send(Ok(()));
            return;
        };
        let pending = PendingWrite { write, reply };
        match self.writes.get_mut(&id) {
            Some(queue) => queue.push_back(pending),
            None => {
                self.writes.insert(id.clone(), VecDeque::new());
                self.spawn_write(myself, id, pending);
            }
        }
    }

    fn spawn_write(&self, myself: &ActorRef<OwnerMsg<K, V>>, id: K, pending: PendingWrite) {
        let Some(l2) = self.core.l2.clone() else {
            let _ = pending.reply.send(Ok(()));
            let _ = myself.cast(OwnerMsg::Written { id });
            return;
        };
        let myself = myself.clone();
        let PendingWrite { write, reply } = pending;
        tokio::spawn(async move {
            let result = match write {
                L2Write::Put {
                    names,
                    envelope,
                    px,
                } => l2.put(&names, envelope, px).await,
                L2Write::Invalidate { names } => l2.invalidate(&names).await,
            };
            let _ = reply.send(result);
            let _ = myself.cast(OwnerMsg::Written { id });
        });
    }

    /// The write at the head of `id`'s queue finished: start the next one, or the queued flight.
    fn written(&mut self, myself: &ActorRef<OwnerMsg<K, V>>, id: K) {
        let next = self.writes.get_mut(&id).and_then(VecDeque::pop_front);
        if let Some(next) = next {
            self.spawn_write(myself, id, next);
            return;
        }
        self.writes.remove(&id);
        let queued = self
            .flights
            .current_mut(&id)
            .filter(|f| !f.launched)
            .map(|f| f.id);
        if let Some(flight) = queued {
            self.launch(myself, id, flight);
        }
    }
}
