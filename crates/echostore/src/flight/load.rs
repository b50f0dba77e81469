//! The source read: the loader under `catch_unwind`, the table's `load_timeout`, the soft timeout
//! and the lease, and fail-safe when it fails.
//!
//! A panicking or hanging loader fails its waiters instead of hanging them. Past the soft timeout,
//! the waiters get a stale copy (if one is at hand, within its window, and — on Valkey — the lock
//! is still this flight's, so nobody replaced the copy) while the load goes on and fills the
//! cache. Fail-safe tables answer a failed load with a stale copy under the same conditions.

use std::any::Any;
use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::fetched::Origin;
use crate::state::budget::{Budget, Permit};
use crate::state::core::TableCore;
use crate::state::l1::L1Cache;
use crate::state::loser_policy::{LoserPolicy, Lost};
use crate::state::stale::{Filled, Signal, Signals, Stale};
use crate::state::stats::bump;
use crate::wire::key::{Key, Value};

/// The source read of one flight.
pub(crate) struct Load<'a, K, V> {
    core: &'a TableCore<K, V>,
    id: &'a K,
    signals: Signals<'a, V>,
    /// The newest clear or tag generation this process knew when the loader was last called
    /// (`crate::state::marks`): what the row read reflects, so what its write is stamped with.
    read_at: AtomicU64,
    /// The loser policy of the call that started the flight, if it set its own
    /// (`ReadOptions::losers`): for the lock race and the table's budget alike.
    losers: Option<LoserPolicy<Arc<V>>>,
}

impl<'a, K: Key, V: Value> Load<'a, K, V> {
    pub(crate) fn new(core: &'a TableCore<K, V>, id: &'a K, signals: Signals<'a, V>) -> Self {
        let read_at = AtomicU64::new(core.marks.stamp());
        Load {
            core,
            id,
            signals,
            read_at,
            losers: None,
        }
    }

    /// The load with the loser policy `losers` instead of the table's (when given).
    pub(crate) fn losing_by(self, losers: Option<LoserPolicy<Arc<V>>>) -> Self {
        Load { losers, ..self }
    }

    /// The loser policy this load follows: its call's own, else the table's.
    pub(crate) fn policy(&self) -> &LoserPolicy<Arc<V>> {
        self.losers.as_ref().unwrap_or(&self.core.config.losers)
    }

    /// The generation the last source read began under (the flight's start before any): a read
    /// that waited for the table's budget reflects every mark known when it began, and a copy
    /// stamped earlier would be a miss for no reason after a clear or a tag it followed.
    pub(crate) fn read_at(&self) -> u64 {
        self.read_at.load(Ordering::SeqCst)
    }

    /// The fill without Valkey (none configured, or unreachable): the loader alone, with L1's
    /// stale copy for the soft timeout and fail-safe.
    pub(crate) async fn here(&self) -> Result<Filled<V>> {
        let stale = self.l1_stale();
        let mine = || async { Some(true) };
        let loaded = match self.admitted(stale.as_ref()).await {
            Ok((permit, _)) => self.softly(permit, stale.as_ref(), mine).await,
            Err(e) => Err(e),
        };
        match loaded {
            Ok(loaded) => Ok(self.keep_here(loaded)),
            Err(e) => self.fail_safe(e, stale, true),
        }
    }

    /// An early refresh without Valkey: the loader alone. The current value is still fresh, so
    /// there is no stale copy to serve early, and a failure is the refresh's (the current value
    /// stays until its freshness ends).
    pub(crate) async fn refresh_here(&self) -> Result<Filled<V>> {
        let _lease = waiting(self.core).await?;
        Ok(self.keep_here(self.load().await?))
    }

    fn keep_here(&self, (value, delta): (V, Duration)) -> Filled<V> {
        let entry = self.core.loaded_life(&value, delta).entry(Arc::new(value));
        Filled::fresh(entry, Origin::Loaded)
    }

    /// The load while `lease` keeps the lock; `still_ours` asks whether it still holds. `None`:
    /// the read waited for the table's budget and the lock was no longer this flight's after the
    /// wait (a put or an invalidate dropped it, or it expired and was taken over), so another
    /// process may have read or written the id meanwhile: reading the source now could be one
    /// read too many, and the flight looks at Valkey again instead.
    pub(crate) async fn leased<F, Fut>(
        &self,
        lease: impl Future<Output = Infallible>,
        stale: Option<&Stale<V>>,
        still_ours: F,
    ) -> Result<Option<(V, Duration)>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Option<bool>>,
    {
        let load = async {
            let (permit, waited) = self.admitted(stale).await?;
            if waited && still_ours().await == Some(false) {
                return Ok(None);
            }
            self.softly(permit, stale, still_ours).await.map(Some)
        };
        tokio::select! {
            loaded = load => loaded,
            never = lease => match never {},
        }
    }

    /// The load under the table's soft timeout, holding `_permit` of the table's budget: once
    /// it has run that long and a stale copy may be served, the waiters get it now and the load
    /// goes on to fill the cache.
    async fn softly<F, Fut>(
        &self,
        _permit: Option<Permit>,
        stale: Option<&Stale<V>>,
        still_ours: F,
    ) -> Result<(V, Duration)>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Option<bool>>,
    {
        let load = self.load();
        let (Some(soft), Some(stale)) = (self.core.config.soft_timeout, stale) else {
            return load.await;
        };
        tokio::pin!(load);
        tokio::select! {
            done = &mut load => done,
            () = tokio::time::sleep(soft) => {
                if let Some(answer) = stale.answer()
                    && still_ours().await != Some(false)
                {
                    bump(&self.core.stats.counters.soft_timeouts);
                    bump(&self.core.stats.counters.stale_served);
                    (self.signals)(Signal::Early(answer.fetched));
                }
                load.await
            }
        }
    }

    /// A lease of the table's source budget, if it has one. Over budget, the waiters take the
    /// stale copy at once if there is one, whatever the policy (the budget never holds up a read
    /// that has one to serve); else the loser policy decides: the placeholder, or nothing (they
    /// wait with the load), or `FailFast` fails the load at once. `true` beside the permit when
    /// the read had to wait for it.
    pub(crate) async fn admitted(
        &self,
        stale: Option<&Stale<V>>,
    ) -> Result<(Option<Permit>, bool)> {
        let Some(budget) = &self.core.budget else {
            return Ok((None, false));
        };
        if let Some(permit) = budget.try_admit(self.core.l2.as_ref()).await {
            return Ok((Some(permit), false));
        }
        let counters = &self.core.stats.counters;
        let policy = self.policy();
        let early = match stale.and_then(Stale::answer) {
            Some(served) => {
                bump(&counters.stale_served);
                Some(served.fetched)
            }
            // A budget refusal is counted as one (`budget_exhausted`), not as a lock race lost
            // (`on_lost` would count a `failed_fast`).
            None if matches!(policy, LoserPolicy::FailFast) => {
                bump(&counters.budget_exhausted);
                return Err(Error::BudgetExhausted {
                    waited: Duration::ZERO,
                });
            }
            // The placeholder, or nothing: the callers wait with the load.
            None => match policy.on_lost(&self.core.stats, None, self.core.config.lock_ttl) {
                Lost::Answer(answer) => answer.ok().map(|filled| filled.fetched),
                Lost::Poll { .. } => None,
            },
        };
        bump(&counters.budget_waits);
        if let Some(answer) = early {
            (self.signals)(Signal::Early(answer));
        }
        leased(self.core, budget, policy)
            .await
            .map(|permit| (Some(permit), true))
    }

    /// One source read, with the table's timeout, a panic turned into an error; the value and
    /// how long the read took (`delta`, for early refresh).
    pub(crate) async fn load(&self) -> Result<(V, Duration)> {
        bump(&self.core.stats.counters.source_reads);
        self.read_at
            .store(self.core.marks.stamp(), Ordering::SeqCst);
        let loaded = guarded(self.core, || self.source_read()).await;
        let kind = match &loaded {
            Ok(_) => EventKind::Loaded,
            Err(e) if e.is_absent() => return loaded,
            Err(_) => EventKind::LoadFailed,
        };
        self.core.events.emit(Some(self.id), kind);
        loaded
    }

    /// The id's source read: the per-id loader, or else a batch of this one id (an id the batch
    /// loader leaves out is [`Error::Absent`]).
    fn source_read(&self) -> BoxFuture<'static, Result<V>> {
        let id = self.id.clone();
        match (&self.core.loader, &self.core.batch_loader) {
            (Some(loader), _) => {
                let read = loader(id);
                Box::pin(async move { read.await.map_err(Error::Source) })
            }
            (None, Some(batch)) => {
                let read = batch(vec![id.clone()]);
                Box::pin(async move {
                    let mut found = read.await.map_err(Error::Source)?;
                    found.remove(&id).ok_or(Error::Absent)
                })
            }
            (None, None) => Box::pin(async { Err(Error::InvalidConfig("no loader".into())) }),
        }
    }

    /// A failed load: with fail-safe on and a stale copy at hand (the one given, else L1's when
    /// `or_l1`) that is still within its window, serve it. An `Absent` is the source's answer,
    /// not a failure: the row is gone, and a copy of it must not stand in.
    pub(crate) fn fail_safe(
        &self,
        error: Error,
        stale: Option<Stale<V>>,
        or_l1: bool,
    ) -> Result<Filled<V>> {
        if !self.core.config.fail_safe || error.is_absent() {
            return Err(error);
        }
        let l1 = || or_l1.then(|| self.l1_stale()).flatten();
        let served = stale
            .and_then(|copy| copy.answer())
            .or_else(|| l1().and_then(|copy| copy.answer()));
        let Some(served) = served else {
            return Err(error);
        };
        bump(&self.core.stats.counters.fail_safe_served);
        bump(&self.core.stats.counters.stale_served);
        tracing::warn!(table = %self.core.name, id = ?self.id, error = %error, "load failed: served a stale copy (fail-safe)");
        Ok(served)
    }

    /// L1's own copy of the id, if it is within its stale window.
    fn l1_stale(&self) -> Option<Stale<V>> {
        Stale::from_entry(self.core.l1.get(self.id)?)
    }
}

/// A lease of the table's source budget for a read with no one to answer early (a batch, an
/// early refresh): waits for one as long as the table's loser policy waits.
pub(crate) async fn waiting<K, V>(core: &TableCore<K, V>) -> Result<Option<Permit>> {
    lease_after(core, try_lease(core).await).await
}

/// A source read's first ask of the table's budget.
pub(crate) enum Lease {
    /// The table has no budget.
    Free,
    Held(Permit),
    /// The budget is spent for now: the read waits for a lease ([`lease_after`]).
    Spent,
    /// Waited for and not granted: the read fails with this.
    Refused(Error),
}

/// Asks the table's budget for a lease now, without waiting.
pub(crate) async fn try_lease<K, V>(core: &TableCore<K, V>) -> Lease {
    let Some(budget) = &core.budget else {
        return Lease::Free;
    };
    match budget.try_admit(core.l2.as_ref()).await {
        Some(permit) => Lease::Held(permit),
        None => Lease::Spent,
    }
}

/// The lease a read holds while it reads the source, after its first ask: a spent budget is
/// waited for as long as the loser policy waits.
pub(crate) async fn lease_after<K, V>(
    core: &TableCore<K, V>,
    lease: Lease,
) -> Result<Option<Permit>> {
    match (lease, &core.budget) {
        (Lease::Free, _) | (Lease::Spent, None) => Ok(None),
        (Lease::Held(permit), _) => Ok(Some(permit)),
        (Lease::Refused(e), _) => Err(e),
        (Lease::Spent, Some(budget)) => {
            bump(&core.stats.counters.budget_waits);
            leased(core, budget, &core.config.losers).await.map(Some)
        }
    }
}

/// Waits for a lease of `budget` as long as `policy` waits (`lock_ttl` for a policy that does
/// not poll).
async fn leased<K, V>(
    core: &TableCore<K, V>,
    budget: &Budget,
    policy: &LoserPolicy<Arc<V>>,
) -> Result<Permit> {
    let up_to = match policy {
        LoserPolicy::Poll { up_to, .. } => *up_to,
        _ => core.config.lock_ttl,
    };
    let waited = budget.wait(core.l2.as_ref(), up_to).await;
    if waited.is_err() {
        bump(&core.stats.counters.budget_exhausted);
    }
    waited
}

/// A call of the source (`start` makes its future): timed, under the table's `load_timeout`, a
/// panic in making or running the future turned into [`Error::LoaderPanicked`]; its answer and
/// how long it took. The one guard of every source read, one id's or a batch's.
pub(crate) async fn guarded<K, V, T>(
    core: &TableCore<K, V>,
    start: impl FnOnce() -> BoxFuture<'static, Result<T>>,
) -> Result<(T, Duration)> {
    let _timing = crate::state::metrics::Timing::load(&core.name);
    let fill = tracing::Span::current();
    let span = tracing::info_span!("echostore.load", echostore.table = %core.name);
    let began = Instant::now();
    let future = match std::panic::catch_unwind(AssertUnwindSafe(start)) {
        Ok(future) => AssertUnwindSafe(future).catch_unwind(),
        Err(panic) => return Err(Error::LoaderPanicked(panic_message(&*panic))),
    };
    let future = tracing::Instrument::instrument(future, span);
    let finished = match core.config.load_timeout {
        Some(limit) => match tokio::time::timeout(limit, future).await {
            Ok(finished) => finished,
            Err(_) => {
                bump(&core.stats.counters.load_timeouts);
                return Err(Error::LoadTimeout(limit));
            }
        },
        None => future.await,
    };
    fill.record("echostore.load_ms", began.elapsed().as_millis() as u64);
    match finished {
        Ok(Ok(value)) => Ok((value, began.elapsed())),
        Ok(Err(e)) => Err(e),
        Err(panic) => Err(Error::LoaderPanicked(panic_message(&*panic))),
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> Arc<str> {
    if let Some(s) = panic.downcast_ref::<&str>() {
        Arc::from(*s)
    } else if let Some(s) = panic.downcast_ref::<String>() {
        Arc::from(s.as_str())
    } else {
        Arc::from("a non-string panic payload")
    }
}
