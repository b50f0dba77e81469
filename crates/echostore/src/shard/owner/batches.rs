//! How the owners take a batch read: each id joins its running flight or starts one, as a single
//! miss does, in the owner of its shard; the flights started for one batch read, whichever
//! shards they are in, run as one batch ([`crate::flight::batch_fill`]), with one source call.
//!
//! A batch read sends each shard it spans one [`OwnerMsg::FillMany`], all sharing one
//! [`Gather`]. Each owner adds the flights it started to it; the last share to be dropped —
//! handled, or lost with an owner that died — launches what was gathered. So the batch starts
//! only once every shard has admitted its ids (none of them is read before its owner has ordered
//! it against that id's writes), and nothing waits on the caller that sent the messages.

use std::collections::HashMap;
use std::sync::Mutex;

use super::launches::spawn_fill;
use super::*;
use crate::flight::batch_fill::{BatchFill, Report};

impl<K: Key, V: Value> OwnerState<K, V> {
    /// This shard's misses of one batch read: an L1 hit (won since the caller looked) answers at
    /// once; the others join their ids' flights or start them, and the started ones are added
    /// to `gather`, to launch with the rest of the batch's.
    pub(super) fn fill_many(
        &mut self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        misses: Vec<(K, Reply<V>)>,
        gather: Arc<Gather<K, V>>,
    ) {
        let mut started = Vec::new();
        for (id, reply) in misses {
            if let Some(hit) = self.l1_hit(&id) {
                let _ = reply.send(Ok(Admitted::Hit(hit)));
                continue;
            }
            let (miss, cell) = self.flights.miss(&id);
            let _ = reply.send(Ok(Admitted::to(&miss, cell)));
            if let Miss::Launch(flight) = miss {
                started.push((id, flight, myself.clone()));
            }
        }
        gather.add(started);
    }
}

/// The flights one batch read started, with the owner each belongs to, gathered from every shard
/// the read spans; dropped by the last share, it launches them: one alone as a single fill, more
/// as one batch.
pub(crate) struct Gather<K, V> {
    core: Arc<TableCore<K, V>>,
    started: Mutex<Vec<Started<K, V>>>,
    /// [`launch`], for this key and value type (a `Drop` cannot ask for the bounds it needs).
    launch: Launch<K, V>,
}

/// A flight an owner started: its id, its name there, and that owner.
type Started<K, V> = (K, FlightId, ActorRef<OwnerMsg<K, V>>);

/// What launches the flights gathered.
type Launch<K, V> = fn(&Arc<TableCore<K, V>>, Vec<Started<K, V>>);

impl<K: Key, V: Value> Gather<K, V> {
    /// An empty gathering for a batch read of `core`'s table.
    pub(crate) fn new(core: Arc<TableCore<K, V>>) -> Arc<Self> {
        Arc::new(Gather {
            core,
            started: Mutex::new(Vec::new()),
            launch: launch::<K, V>,
        })
    }

    fn add(&self, started: Vec<Started<K, V>>) {
        let mut gathered = self.started.lock().unwrap_or_else(|p| p.into_inner());
        gathered.extend(started);
    }
}

impl<K, V> Drop for Gather<K, V> {
    fn drop(&mut self) {
        let started = std::mem::take(self.started.get_mut().unwrap_or_else(|p| p.into_inner()));
        (self.launch)(&self.core, started);
    }
}

/// Launches the flights a batch read gathered: one alone as a single fill, more as one batch.
fn launch<K: Key, V: Value>(core: &Arc<TableCore<K, V>>, mut started: Vec<Started<K, V>>) {
    // No runtime left to run them on: their owners, and their waiters, are gone too.
    if started.is_empty() || tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    if started.len() == 1 {
        let (id, flight, owner) = started.remove(0);
        return spawn_fill(Arc::clone(core), owner, id, flight, Start::default());
    }
    let span = tracing::info_span!("echostore.batch_fill", echostore.table = %core.name, echostore.ids = started.len());
    let counts = Arc::clone(core);
    let core = Arc::clone(core);
    let fill = async move {
        let owners = started.iter().map(|(id, _, o)| (id.clone(), o.clone()));
        let report = ToOwners {
            owners: owners.collect(),
            core: Arc::clone(&core),
        };
        let ids: Vec<(K, FlightId)> = started
            .into_iter()
            .map(|(id, flight, _)| (id, flight))
            .collect();
        let batch = BatchFill::new(&core, &report);
        if AssertUnwindSafe(batch.run(ids.clone()))
            .catch_unwind()
            .await
            .is_err()
        {
            // Flights that had landed ignore a second landing.
            for (id, flight) in ids {
                let outcome = Err(Error::LoaderPanicked("the batch fill panicked".into()));
                report.landed(id, flight, outcome);
            }
        }
    }
    .instrument(span);
    tokio::spawn(counts.under_way(fill));
}

/// A batch's landings and signals, each cast to the owner of its id's flight, as its single
/// flights' are (each landing made on the batch's task first, if it may be).
struct ToOwners<K: Key, V: Value> {
    owners: HashMap<K, ActorRef<OwnerMsg<K, V>>>,
    core: Arc<TableCore<K, V>>,
}

impl<K: Key, V: Value> ToOwners<K, V> {
    fn cast(&self, id: &K, message: OwnerMsg<K, V>) {
        // If the owner is gone, its waiters were already answered `Stopped`.
        if let Some(owner) = self.owners.get(id) {
            let _ = owner.cast(message);
        }
    }
}

impl<K: Key, V: Value> Report<K, V> for ToOwners<K, V> {
    fn landed(&self, id: K, flight: FlightId, outcome: Result<Landing<V>>) {
        // Landed on the batch's task: nothing is left for the owner (as for a single flight).
        let Some(outcome) = land_on_own_task(&self.core, &id, flight, outcome) else {
            return;
        };
        let key = id.clone();
        let landed = OwnerMsg::Landed {
            id,
            flight,
            refresh: false,
            outcome,
        };
        self.cast(&key, landed);
    }

    fn signal(&self, id: &K, flight: FlightId, signal: Signal<V>) {
        let message = match signal {
            Signal::Early(answer) => OwnerMsg::Early {
                id: id.clone(),
                flight,
                answer,
            },
            Signal::Writing(fingerprint) => OwnerMsg::Writing {
                id: id.clone(),
                fingerprint,
            },
            Signal::NotWritten(fingerprint) => OwnerMsg::NotWritten {
                id: id.clone(),
                fingerprint,
            },
            Signal::Reading => OwnerMsg::Reading {
                id: id.clone(),
                flight,
            },
        };
        self.cast(id, message);
    }
}
