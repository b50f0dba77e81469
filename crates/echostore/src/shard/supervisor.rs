//! The store's supervisor: every table owner is linked under it, and it restarts an owner that
//! crashes.
//!
//! An owner only crashes on a bug or on a `Key` whose `Hash`/`Eq` panics — the loader runs in the
//! flight's own task, where a panic becomes an error for its waiters. When an owner crashes, the
//! calls in its mailbox and the waiters of its flights are dropped, so their callers get
//! `Error::Stopped` at once. The supervisor then starts a fresh owner for the same table (same L1,
//! same counters, `owner_restarts` + 1, no flights) and points the table's handles at it; flight
//! tasks of the dead owner still finish and write to Valkey, but their answers go nowhere. An owner
//! that stops because its table was dropped or the store shut down is not restarted. An end that
//! arrives before the owner's `Watch` is remembered, and the `Watch` then restarts or forgets it.

use std::collections::HashMap;

use futures::future::BoxFuture;
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};

/// Starts a replacement owner linked under the given supervisor; `None` when the table is gone.
pub(crate) type Restart = Box<dyn FnMut(ActorCell) -> BoxFuture<'static, Option<ActorCell>> + Send>;

/// Messages to the supervisor.
pub(crate) enum SupervisorMsg {
    /// Restart `owner` with `restart` if it crashes.
    Watch { owner: ActorId, restart: Restart },
}

/// The supervisor's behaviour.
pub(crate) struct Supervisor;

/// Owners being watched, by actor id.
pub(crate) struct SupervisorState {
    watched: HashMap<ActorId, Restart>,
    /// Owners whose end arrived before their `Watch` (`true`: they failed): a table dropped, or
    /// crashed, right after it started. Their `Watch` then restarts or forgets them.
    ended_unwatched: HashMap<ActorId, bool>,
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(SupervisorState {
            watched: HashMap::new(),
            ended_unwatched: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Watch { owner, mut restart } => {
                match state.ended_unwatched.remove(&owner) {
                    // It crashed before this message was read: restart it now.
                    Some(true) => {
                        if let Some(fresh) = restart(myself.get_cell()).await {
                            state.watched.insert(fresh.get_id(), restart);
                        }
                    }
                    // It stopped (its table was dropped): keeping the restart would keep the
                    // table's parts alive.
                    Some(false) => {}
                    None => {
                        state.watched.insert(owner, restart);
                    }
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(owner, reason) => {
                tracing::error!(owner = %owner.get_id(), %reason, "table owner crashed; restarting it");
                let Some(mut restart) = state.watched.remove(&owner.get_id()) else {
                    state.ended_unwatched.insert(owner.get_id(), true);
                    return Ok(());
                };
                if let Some(fresh) = restart(myself.get_cell()).await {
                    state.watched.insert(fresh.get_id(), restart);
                }
            }
            SupervisionEvent::ActorTerminated(owner, _, _) => {
                let id = owner.get_id();
                let was_watched = state.watched.remove(&id).is_some();
                if !was_watched {
                    state.ended_unwatched.insert(id, false);
                }
            }
            _ => {}
        }
        Ok(())
    }
}
