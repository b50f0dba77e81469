//! How a flight starts: as a task of its own that runs the fill (`crate::flight::fill`),
//! signals the owner on the way, lands on its own task when it may (`landings::land_on_own_task`)
//! and reports its landing; the owner goes on serving meanwhile. A caller that admitted the
//! flight itself runs it on its own task up to its first wait ([`launch_fill`]).

use super::*;

/// How a flight starts, beyond its id.
pub(crate) struct Start<V> {
    /// An early refresh of the L1 value fresh until then.
    pub(crate) refreshing: Option<Moment>,
    /// The loser policy of the call that started it, if not the table's.
    pub(crate) losers: Option<LoserPolicy<Arc<V>>>,
    /// The caller that started it has just read Valkey and found no fresh copy.
    pub(crate) read: bool,
}

impl<V> Default for Start<V> {
    fn default() -> Self {
        Start {
            refreshing: None,
            losers: None,
            read: false,
        }
    }
}

impl<K: Key, V: Value> OwnerState<K, V> {
    /// Starts a flight as a task of its own; the owner goes on serving.
    pub(super) fn launch(
        &self,
        myself: &ActorRef<OwnerMsg<K, V>>,
        id: K,
        flight: FlightId,
        start: Start<V>,
    ) {
        spawn_fill(Arc::clone(&self.core), myself.clone(), id, flight, start);
    }
}

/// Runs the fill of `owner`'s flight `flight` of `id` as a task of its own, which signals `owner`
/// on the way, answers its callers itself when it may, and reports its landing to it. The owner
/// launches the flights it admits; a caller launches the one it admitted itself
/// (`crate::handle::miss`).
pub(crate) fn spawn_fill<K: Key, V: Value>(
    core: Arc<TableCore<K, V>>,
    owner: ActorRef<OwnerMsg<K, V>>,
    id: K,
    flight: FlightId,
    start: Start<V>,
) {
    let fill = core.under_way(fill_task(Arc::clone(&core), owner, id, flight, start));
    tokio::spawn(fill);
}

/// Like [`spawn_fill`], for a caller that admitted the flight itself: the fill is polled once
/// on the caller's task first, and spawned only if that poll left it pending. A loader that
/// answers at once (no Valkey, a value computed in memory) then lands with no task hand-off,
/// as moka's `get_with` does; a fill that waits on anything is a task of its own from its first
/// wait on, so no joiner ever depends on the caller polling its own read.
pub(crate) fn launch_fill<K: Key, V: Value>(
    core: Arc<TableCore<K, V>>,
    owner: ActorRef<OwnerMsg<K, V>>,
    id: K,
    flight: FlightId,
    start: Start<V>,
) {
    let fill = core.under_way(fill_task(Arc::clone(&core), owner, id, flight, start));
    let mut fill = Box::pin(fill);
    // Nothing must wake this caller for the fill: the spawned task polls it again at once,
    // with its own waker, which is the one a pending future wakes.
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if fill.as_mut().poll(&mut cx).is_pending() {
        tokio::spawn(fill);
    }
}

/// The fill of `owner`'s flight `flight` of `id`, as the future a task runs.
fn fill_task<K: Key, V: Value>(
    core: Arc<TableCore<K, V>>,
    owner: ActorRef<OwnerMsg<K, V>>,
    id: K,
    flight: FlightId,
    start: Start<V>,
) -> impl Future<Output = ()> + Send + 'static {
    let Start {
        refreshing,
        losers,
        read,
    } = start;
    let span = tracing::info_span!(
        "echostore.fill",
        echostore.table = %core.name,
        echostore.id_hash = %crate::spans::id_hash(&id),
        echostore.lock = tracing::field::Empty,
        echostore.origin = tracing::field::Empty,
        echostore.load_ms = tracing::field::Empty,
    );
    async move {
        let signals = signals_to(owner.clone(), id.clone(), flight);
        let fill = Fill::new(&core, &id, &signals)
            .losing_by(losers)
            .after_read(read);
        let fill = match refreshing {
            Some(until) => fill.refreshing(until),
            None => fill,
        };
        // The span ends before the answer: whoever has it finds the fill's trace complete.
        let outcome = async {
            let outcome = AssertUnwindSafe(fill.run())
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err(Error::LoaderPanicked("the fill panicked".into())));
            crate::spans::record("echostore.origin", landed_as(&outcome));
            outcome
        }
        .instrument(span)
        .await;
        // Landed on its own task, the flight has left its id's state: nothing is left for the
        // owner to end, so it hears nothing (the miss path does not touch its mailbox).
        let Some(outcome) = land_on_own_task(&core, &id, flight, outcome) else {
            return;
        };
        // If the owner is gone, its waiters were already answered `Stopped`.
        let _ = owner.cast(OwnerMsg::Landed {
            id,
            flight,
            refresh: refreshing.is_some(),
            outcome,
        });
    }
}

/// The signals of `flight` of `id`, cast to `owner` as they come.
fn signals_to<K: Key, V: Value>(
    owner: ActorRef<OwnerMsg<K, V>>,
    id: K,
    flight: FlightId,
) -> impl Fn(Signal<V>) {
    move |signal| {
        let id = id.clone();
        let _ = owner.cast(match signal {
            Signal::Early(answer) => OwnerMsg::Early { id, flight, answer },
            Signal::Writing(fingerprint) => OwnerMsg::Writing { id, fingerprint },
            Signal::NotWritten(fingerprint) => OwnerMsg::NotWritten { id, fingerprint },
            Signal::Reading => OwnerMsg::Reading { id, flight },
        });
    }
}

/// What a fill landed as, for its span's `echostore.origin`.
fn landed_as<V>(outcome: &Result<Landing<V>>) -> &'static str {
    match outcome {
        Ok(Landing::Filled(filled)) => filled.fetched.origin.as_str(),
        Ok(Landing::FlyAgain) => "skipped",
        Err(_) => "error",
    }
}
