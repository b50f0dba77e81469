//! The winner's reloader call (`.reloader`, [`crate::state::reload`]): given the copy on Valkey in its
//! stale window, under the lock and its lease; "unchanged" renews that copy in place, "gone"
//! deletes it, and "changed" goes on as a load.

use super::*;

use crate::events::EventKind;
use crate::state::reload::Reload;

/// What the winner does after asking the reloader (or not).
pub(super) enum Reloaded<V> {
    /// Not asked (no reloader, or no copy on Valkey to give it): load, with the stale copy back.
    NotAsked(Option<Stale<V>>),
    /// The source holds a new value: store it as a load's.
    Changed(V, Duration),
    /// Answered: renewed, gone, or failed.
    Done(Result<Filled<V>>),
}

impl<K: Key, V: Value> Fill<'_, K, V> {
    /// Asks the reloader about `stale`'s copy, if the table has one and the copy came from Valkey.
    pub(super) async fn reload(&self, held: &HeldLock<'_>, stale: Option<Stale<V>>) -> Reloaded<V> {
        let (Some(reloader), Some(copy)) = (&self.core.reloader, stale.as_ref()) else {
            return Reloaded::NotAsked(stale);
        };
        let Some((old, written_at, fingerprint)) = copy.on_valkey() else {
            return Reloaded::NotAsked(stale);
        };
        let old = Arc::clone(old);
        bump(&self.core.stats.counters.source_reads);
        let call = || -> futures::future::BoxFuture<'static, Result<Reload<V>>> {
            let reload = reloader(self.id.clone(), Arc::clone(&old));
            Box::pin(async move { reload.await.map_err(Error::Source) })
        };
        let answered = tokio::select! {
            answered = async {
                let _lease = crate::flight::load::waiting(self.core).await?;
                crate::flight::load::guarded(self.core, call).await
            } => answered,
            never = self.lease(held) => match never {},
        };
        let events = &self.core.events;
        let (reload, delta) = match answered {
            Ok(answered) => answered,
            Err(e) => {
                events.emit(Some(self.id), EventKind::LoadFailed);
                let ours = self.release(held).await != Some(false);
                return Reloaded::Done(self.load.fail_safe(e, stale.filter(|_| ours), ours));
            }
        };
        events.emit(Some(self.id), EventKind::Loaded);
        let renewal = Renewal {
            old,
            written_at,
            fingerprint,
            delta,
        };
        match reload {
            Reload::Changed(value) => Reloaded::Changed(value, delta),
            Reload::Unchanged => Reloaded::Done(Ok(self.renew(held, renewal).await)),
            Reload::Gone => Reloaded::Done(self.gone(held, written_at).await),
        }
    }

    /// "Unchanged": the copy's life restamped on Valkey and the same value kept in L1 for the
    /// new life; if the lock or the copy changed meanwhile, the value answers but is kept nowhere.
    async fn renew(&self, held: &HeldLock<'_>, copy: Renewal<V>) -> Filled<V> {
        let life = self.core.loaded_life(&copy.old, copy.delta);
        if let Some(fingerprint) = copy.fingerprint {
            (self.signals)(Signal::Writing(fingerprint));
        }
        let lives = Some((millis(life.fresh_for), life.physical_ms()));
        let renewed = held.renew(copy.written_at, lives).await;
        if self.landed(held, renewed).await {
            bump(&self.core.stats.counters.reloads_unchanged);
            let entry = life.entry(Arc::clone(&copy.old));
            return Filled::fresh(entry, Origin::Loaded).made_from(copy.fingerprint);
        }
        Filled::answer_only(copy.old, Origin::Loaded)
    }

    /// "Gone": the copy deleted (fenced like a write), and the read answers `Absent`.
    async fn gone(&self, held: &HeldLock<'_>, written_at: u64) -> Result<Filled<V>> {
        let deleted = held.renew(written_at, None).await;
        self.landed(held, deleted).await;
        Err(Error::Absent)
    }

    /// Counts a renewal's outcome as a fenced write's; whether it landed.
    async fn landed(&self, held: &HeldLock<'_>, outcome: Result<Fenced>) -> bool {
        let counters = &self.core.stats.counters;
        match outcome {
            Ok(Fenced::Written) => {
                bump(&counters.released);
                true
            }
            Ok(Fenced::NotOurs) => {
                bump(&counters.fenced_write_skipped);
                bump(&counters.release_skipped);
                false
            }
            Ok(Fenced::Superseded) => {
                bump(&counters.released);
                false
            }
            Err(e) => {
                bump(&counters.l2_errors);
                tracing::warn!(table = %self.core.name, id = ?self.id, error = %e, "renewing a reloaded copy failed");
                self.release(held).await;
                false
            }
        }
    }
}

/// The copy a reloader called unchanged.
struct Renewal<V> {
    old: Arc<V>,
    written_at: u64,
    fingerprint: Option<Fingerprint>,
    delta: Duration,
}
