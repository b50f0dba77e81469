//! How the owner takes a batch read: each id joins its running flight or starts one, as a
//! single miss does, and the flights it started run as one batch ([`crate::batch::fill`]).

use super::*;
use crate::batch::fill::{BatchFill, Report};

impl<K: Key, V: Value> OwnerState<K, V> {
    /// The misses of one batch read: an L1 hit (won since the caller looked) answers at once; the
    /// others join their ids' flights or start them, and the started ones launch together.
    pub(super) fn fill_many(
        &mut self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        misses: Vec<(K, Reply<V>)>,
    ) {
        let mut started = Vec::new();
        for (id, reply) in misses {
            if let Some(hit) = self.l1_hit(&id) {
                if !reply.is_closed() {
                    let _ = reply.send(Ok(hit));
                }
                continue;
            }
            match self.flights.miss(&id, Some(reply)) {
                Miss::Coalesced => bump(&self.core.stats.counters.coalesced),
                Miss::Launch(flight) => started.push((id, flight)),
                Miss::Queued => {}
            }
        }
        match started.len() {
            0 => {}
            1 => {
                let (id, flight) = started.remove(0);
                self.launch(myself, id, flight, Start::default());
            }
            _ => self.launch_batch(myself, started),
        }
    }

    /// Starts the flights `started` as one batch, a task of its own; each lands as its own
    /// [`OwnerMsg::Landed`].
    fn launch_batch(&self, myself: &ActorRef<OwnerMsg<K, V>>, started: Vec<(K, FlightId)>) {
        let core = Arc::clone(&self.core);
        let report = ToOwner(myself.clone());
        let span = tracing::debug_span!("batch fill", table = %core.name, ids = started.len());
        tokio::spawn(
            async move {
                let ids: Vec<(K, FlightId)> = started.clone();
                let batch = BatchFill::new(&core, &report);
                if AssertUnwindSafe(batch.run(started))
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
            .instrument(span),
        );
    }
}

/// A batch's landings and signals, cast to the owner as its single flights' are.
struct ToOwner<K: Key, V: Value>(ActorRef<OwnerMsg<K, V>>);

impl<K: Key, V: Value> Report<K, V> for ToOwner<K, V> {
    fn landed(&self, id: K, flight: FlightId, outcome: Result<Landing<V>>) {
        // If the owner is gone, its waiters were already answered `Stopped`.
        let _ = self.0.cast(OwnerMsg::Landed {
            id,
            flight,
            refresh: false,
            outcome,
        });
    }

    fn signal(&self, id: &K, flight: FlightId, signal: Signal<V>) {
        let id = id.clone();
        let _ = self.0.cast(match signal {
            Signal::Early(answer) => OwnerMsg::Early { id, flight, answer },
            Signal::Writing(fingerprint) => OwnerMsg::Writing { id, fingerprint },
            Signal::Reading => OwnerMsg::Reading { flight },
        });
    }
}
