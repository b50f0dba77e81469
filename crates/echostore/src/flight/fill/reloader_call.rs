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
    /// A value to write as a load's: the source's new one, or the unchanged one whose copy left
    /// Valkey before it could be renewed.
    Store(Arc<V>, Duration),
    /// The unchanged value, whose lock a write dropped meanwhile: it lands as a fenced-out load.
    FencedOut(Arc<V>),
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
        let call = || -> futures::future::BoxFuture<'static, Result<Reload<V>>> {
            let reload = reloader(self.id.clone(), Arc::clone(&old));
            Box::pin(async move { reload.await.map_err(Error::Source) })
        };
        // Outer error: the table's budget refused the call (and the callers took the copy being
        // reloaded at once); no source was read.
        let answered: Result<Result<_>> = tokio::select! {
            answered = async {
                let _lease = self.load.admitted(stale.as_ref()).await?;
                bump(&self.core.stats.counters.source_reads);
                Ok(crate::flight::load::guarded(self.core, call).await)
            } => answered,
            never = self.lease(held) => match never {},
        };
        let events = &self.core.events;
        let failed = match answered {
            Ok(Ok(answered)) => Ok(answered),
            Ok(Err(e)) => {
                events.emit(Some(self.id), EventKind::LoadFailed);
                Err(e)
            }
            Err(refused) => Err(refused),
        };
        let (reload, delta) = match failed {
            Ok(answered) => answered,
            Err(e) => {
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
            Reload::Changed(value) => Reloaded::Store(Arc::new(value), delta),
            Reload::Unchanged => self.renew(held, renewal).await,
            Reload::Gone => Reloaded::Done(self.gone(held, written_at).await),
        }
    }

    /// "Unchanged": the copy's life restamped on Valkey and the same value kept in L1 for the
    /// new life. A copy that left Valkey meanwhile (its stale window over while the reloader ran,
    /// or evicted) is written in full instead, under the same lock, as a load's value would be:
    /// else the value would be kept nowhere and every process's next read would load it again.
    /// A write that dropped the lock meanwhile makes it a fenced-out load's value.
    async fn renew(&self, held: &HeldLock<'_>, copy: Renewal<V>) -> Reloaded<V> {
        let life = self.core.loaded_life(&copy.old, copy.delta);
        if let Some(fingerprint) = copy.fingerprint {
            (self.signals)(Signal::Writing(fingerprint));
        }
        let lives = Some((millis(life.fresh_for), life.physical_ms()));
        let counters = &self.core.stats.counters;
        let renewed = held.renew(copy.written_at, lives).await;
        if let Some(fingerprint) = copy.fingerprint
            && !matches!(renewed, Ok(Renewed::Done))
        {
            (self.signals)(Signal::NotWritten(fingerprint));
        }
        match renewed {
            Ok(Renewed::Done) => {
                bump(&counters.released);
                bump(&counters.reloads_unchanged);
                let entry = life.entry(Arc::clone(&copy.old));
                Reloaded::Done(Ok(
                    Filled::fresh(entry, Origin::Loaded).made_from(copy.fingerprint)
                ))
            }
            Ok(Renewed::CopyLeft) => {
                tracing::debug!(table = %self.core.name, id = ?self.id, "the reloaded copy left valkey: written in full");
                Reloaded::Store(copy.old, copy.delta)
            }
            Ok(Renewed::NotOurs) => {
                bump(&counters.fenced_write_skipped);
                bump(&counters.release_skipped);
                tracing::debug!(table = %self.core.name, id = ?self.id, "renewal skipped: the lock is no longer ours");
                Reloaded::FencedOut(copy.old)
            }
            Err(e) => {
                self.renewal_failed(held, &e).await;
                Reloaded::Done(Ok(Filled::answer_only(copy.old, Origin::Loaded)))
            }
        }
    }

    /// "Gone": the copy deleted (fenced like a write), and the read answers `Absent`.
    async fn gone(&self, held: &HeldLock<'_>, written_at: u64) -> Result<Filled<V>> {
        let counters = &self.core.stats.counters;
        match held.renew(written_at, None).await {
            Ok(Renewed::Done) => bump(&counters.released),
            // Nothing left to delete.
            Ok(Renewed::CopyLeft) => _ = self.release(held).await,
            Ok(Renewed::NotOurs) => {
                bump(&counters.fenced_write_skipped);
                bump(&counters.release_skipped);
            }
            // Valkey may still hold the copy the source called gone: it goes before this process
            // trusts Valkey for the id again, else a later read could serve it after `Absent`.
            Err(e) => {
                self.renewal_failed(held, &e).await;
                self.unsettle(held, None);
            }
        }
        Err(Error::Absent)
    }

    /// A renewal whose outcome is unknown: counted, logged, and the lock released if still ours.
    async fn renewal_failed(&self, held: &HeldLock<'_>, e: &Error) {
        bump(&self.core.stats.counters.l2_errors);
        tracing::warn!(table = %self.core.name, id = ?self.id, error = %e, "renewing a reloaded copy failed");
        self.release(held).await;
    }
}

/// The copy a reloader called unchanged.
struct Renewal<V> {
    old: Arc<V>,
    written_at: u64,
    fingerprint: Option<Fingerprint>,
    delta: Duration,
}
