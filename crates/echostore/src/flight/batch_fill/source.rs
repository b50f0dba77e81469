//! The batch's source read: one batch loader call for every id it has to load (or, without a
//! batch loader, the per-id loader a few at a time), the lease that keeps the won locks while it
//! runs (one command per slot group), and the whole batch when the table has no Valkey.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures::StreamExt;
use futures::future::join_all;

use super::on_valkey;
use super::{BatchFill, Member};
use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::fetched::Origin;
use crate::flight::load::{Lease, Load};
use crate::state::core::millis;
use crate::state::flight_id::FlightId;
use crate::state::stale::{Filled, Landing};
use crate::state::stats::bump;
use crate::valkey::l2::L2;
use crate::valkey::lock::next_extension;
use crate::wire::key::{Key, KeyNames, Value};

/// How many per-id loader calls a batch runs at once when the table has no batch loader.
pub(crate) const LOADS_AT_ONCE: usize = 16;

impl<K: Key, V: Value> BatchFill<'_, K, V> {
    /// The batch without Valkey: one source call, every value kept in L1.
    pub(super) async fn here(&self, ids: Vec<(K, FlightId)>) {
        let lease = crate::flight::load::try_lease(self.core).await;
        let mut loaded = self
            .load(ids.iter().map(|(id, _)| id.clone()).collect(), lease)
            .await;
        for (id, flight) in ids {
            let load = Load::new(self.core, &id, &|_| {});
            let outcome = match loaded.remove(&id).unwrap_or(Err(Error::Absent)) {
                Ok((value, delta)) => {
                    let life = self.core.loaded_life(&value, delta);
                    Ok(Landing::Filled(Filled::fresh(
                        life.entry(Arc::new(value)),
                        Origin::Loaded,
                    )))
                }
                Err(e) if e.is_absent() => Err(e),
                Err(e) => load.fail_safe(e, None, true).map(Landing::Filled),
            };
            self.report.landed(id, flight, outcome);
        }
    }

    /// The source read of `ids`: one batch loader call, or the per-id loader for each (at most
    /// [`LOADS_AT_ONCE`] at a time). Ids left out are absent.
    /// `lease` is the batch call's first ask of the table's budget (a call is one lease); the
    /// per-id loader's calls each take their own.
    pub(super) async fn load(
        &self,
        ids: Vec<K>,
        lease: Lease,
    ) -> HashMap<K, Result<(V, Duration)>> {
        let Some(batch) = &self.core.batch_loader else {
            drop(lease); // each call takes a lease of its own
            let each = futures::stream::iter(ids)
                .map(|id| async move {
                    let loaded = match crate::flight::load::waiting(self.core).await {
                        Ok(_lease) => Load::new(self.core, &id, &|_| {}).load().await,
                        Err(e) => Err(e),
                    };
                    (id, loaded)
                })
                .buffer_unordered(LOADS_AT_ONCE);
            return each.collect().await;
        };
        let asked = ids.clone();
        let outcome = match crate::flight::load::lease_after(self.core, lease).await {
            Ok(_lease) => {
                // Counted once the call is made: a call the budget refused read no source.
                let counters = &self.core.stats.counters;
                bump(&counters.batch_loads);
                let n = ids.len() as u64;
                counters.batch_loaded_ids.fetch_add(n, Relaxed);
                counters.source_reads.fetch_add(n, Relaxed);
                let called = crate::flight::load::guarded(self.core, || {
                    let call = batch(ids);
                    Box::pin(async move { call.await.map_err(Error::Source) })
                })
                .await;
                if called.is_err() {
                    for id in &asked {
                        self.core.events.emit(Some(id), EventKind::LoadFailed);
                    }
                }
                called
            }
            // Refused by the table's budget: no source was read, and no load failed.
            Err(e) => Err(e),
        };
        let events = &self.core.events;
        match outcome {
            Ok((mut found, delta)) => asked
                .into_iter()
                .filter_map(|id| {
                    let value = found.remove(&id)?;
                    events.emit(Some(&id), EventKind::Loaded);
                    Some((id, Ok((value, delta))))
                })
                .collect(),
            Err(e) => asked.into_iter().map(|id| (id, Err(e.clone()))).collect(),
        }
    }

    /// The source read of the members that load, under the lease of their locks, and the
    /// flights of those whose lock was lost while the read waited for the table's budget.
    pub(super) async fn load_leased(
        &self,
        l2: &L2,
        members: &[Member<K, V>],
    ) -> (HashMap<K, Result<(V, Duration)>>, Vec<FlightId>) {
        let loading: Vec<&Member<K, V>> = members.iter().filter(|m| m.load).collect();
        if loading.is_empty() {
            return (HashMap::new(), Vec::new());
        }
        if self.core.batch_loader.is_none() {
            return tokio::select! {
                read = self.load_each(l2, &loading) => read,
                never = self.lease(l2, &loading) => match never {},
            };
        }
        let lease = crate::flight::load::try_lease(self.core).await;
        if matches!(lease, Lease::Spent) {
            self.stale_meanwhile(&loading);
        }
        let read = async {
            let (lease, lost) = self.queued(l2, &loading, lease).await;
            // The batch loader's call begins now (its lease is had): its rows reflect every mark
            // known by now.
            let at = self.core.marks.stamp();
            loading.iter().for_each(|m| m.read_at(at));
            let ids = loading.iter().filter(|m| !lost.contains(&m.flight));
            let ids = ids.map(|m| m.id.clone()).collect();
            (self.load(ids, lease).await, lost)
        };
        tokio::select! {
            read = read => read,
            never = self.lease(l2, &loading) => match never {},
        }
    }

    /// The batch call's lease of a spent budget, waited for here, and the won locks asked once
    /// more after the wait: a lock a put or an invalidate dropped meanwhile (or that expired and
    /// was taken over) leaves its id to what that change left on Valkey, or to another
    /// process's read, so the batch reads no source for it and it contends again (as a single
    /// fill does, `Won::LostWhileQueued`).
    async fn queued(
        &self,
        l2: &L2,
        loading: &[&Member<K, V>],
        lease: Lease,
    ) -> (Lease, Vec<FlightId>) {
        if !matches!(lease, Lease::Spent) {
            return (lease, Vec::new());
        }
        let lease = match crate::flight::load::lease_after(self.core, lease).await {
            Ok(Some(permit)) => Lease::Held(permit),
            Ok(None) => Lease::Free,
            Err(e) => return (Lease::Refused(e), Vec::new()),
        };
        let won: Vec<&Member<K, V>> = loading.iter().copied().filter(|m| m.won).collect();
        let names: Vec<&KeyNames> = won.iter().map(|m| &m.names).collect();
        let ttl = millis(self.core.config.lock_ttl);
        let asked = join_all(on_valkey::groups(l2, &names).into_iter().map(|group| {
            let locks: Vec<(&KeyNames, &str)> = group
                .iter()
                .map(|&i| (&won[i].names, won[i].token.as_str()))
                .collect();
            let flights: Vec<FlightId> = group.iter().map(|&i| won[i].flight).collect();
            async move { (flights, on_valkey::extend_many(l2, &locks, ttl).await) }
        }));
        let mut lost = Vec::new();
        for (flights, ours) in asked.await {
            // An error leaves the lock as it was thought to be: ours.
            let Ok(ours) = ours else { continue };
            lost.extend(
                flights
                    .into_iter()
                    .zip(ours)
                    .filter(|(_, o)| !o)
                    .map(|(f, _)| f),
            );
        }
        (lease, lost)
    }

    /// Without a batch loader: the per-id loader for each member, at most [`LOADS_AT_ONCE`] at a
    /// time, each under a lease of the table's budget of its own. A member that had to wait, for
    /// the lease or for a free slot behind the first [`LOADS_AT_ONCE`], asks once more whether
    /// its lock is still its own, as the batch call's members do ([`Self::queued`]): one whose
    /// lock went meanwhile reads no source and contends again.
    async fn load_each(
        &self,
        l2: &L2,
        loading: &[&Member<K, V>],
    ) -> (HashMap<K, Result<(V, Duration)>>, Vec<FlightId>) {
        // The first call's ask is the batch's, as the batch loader's call asks: a spent budget
        // answers every member's stale copy now, not as each call's turn comes.
        let first = crate::flight::load::try_lease(self.core).await;
        if matches!(first, Lease::Spent) {
            self.stale_meanwhile(loading);
        }
        let mut first = Some(first);
        let calls: Vec<_> = (loading.iter().enumerate())
            .map(|(at, &m)| self.load_one(l2, m, first.take(), at >= LOADS_AT_ONCE))
            .collect();
        let each = futures::stream::iter(calls).buffer_unordered(LOADS_AT_ONCE);
        let (mut loaded, mut lost) = (HashMap::new(), Vec::new());
        for outcome in each.collect::<Vec<_>>().await {
            match outcome {
                Ok((id, outcome)) => {
                    loaded.insert(id, outcome);
                }
                Err(flight) => lost.push(flight),
            }
        }
        (loaded, lost)
    }

    /// One member's per-id loader call under a lease of its own (`asked`: the budget's answer
    /// already had); its flight instead when it waited (for the lease, or `behind` other calls
    /// for a slot) and its lock went meanwhile.
    async fn load_one(
        &self,
        l2: &L2,
        m: &Member<K, V>,
        asked: Option<Lease>,
        behind: bool,
    ) -> std::result::Result<(K, Result<(V, Duration)>), FlightId> {
        let lease = match asked {
            Some(lease) => lease,
            None => crate::flight::load::try_lease(self.core).await,
        };
        let queued = behind || matches!(lease, Lease::Spent);
        let loaded = match crate::flight::load::lease_after(self.core, lease).await {
            Ok(_) if queued && !self.still_ours(l2, m).await => return Err(m.flight),
            Ok(_lease) => {
                let load = Load::new(self.core, &m.id, &|_| {});
                let loaded = load.load().await;
                m.read_at(load.read_at());
                loaded
            }
            Err(e) => Err(e),
        };
        Ok((m.id.clone(), loaded))
    }

    /// Whether `m`'s lock is still its own (a lock it did not win is none of its business). An
    /// error leaves the lock as it was thought to be: its own.
    async fn still_ours(&self, l2: &L2, m: &Member<K, V>) -> bool {
        if !m.won {
            return true;
        }
        let ttl = millis(self.core.config.lock_ttl);
        let asked = on_valkey::extend_many(l2, &[(&m.names, m.token.as_str())], ttl).await;
        !matches!(asked.as_deref(), Ok([false]))
    }

    /// The lease of every won lock among `loading`: extended every `lock_ttl / 3` while the
    /// batch loads, one command per group, and sooner after a round in which a group's command
    /// failed (`next_extension`). A lock found lost is not asked for again: another holder has
    /// it, and it is counted lost once, as a single fill's lease counts it. Never returns; the
    /// load ending drops it.
    pub(super) async fn lease(
        &self,
        l2: &L2,
        loading: &[&Member<K, V>],
    ) -> std::convert::Infallible {
        let every = (self.core.config.lock_ttl / 3).max(Duration::from_millis(1));
        let won: Vec<(&KeyNames, &str)> = loading
            .iter()
            .filter(|m| m.won)
            .map(|m| (&m.names, m.token.as_str()))
            .collect();
        let names: Vec<&KeyNames> = won.iter().map(|(names, _)| *names).collect();
        let groups = on_valkey::groups(l2, &names);
        let mut held = vec![true; won.len()];
        let mut pause = every;
        loop {
            tokio::time::sleep(pause).await;
            let failed = self.extend(l2, &won, &groups, &mut held).await;
            pause = next_extension(every, failed);
        }
    }

    /// One round of the lease: extends the locks of `won` still `held`, group by group; `true`
    /// if a group's command failed (its locks live on what is left of their lives).
    async fn extend(
        &self,
        l2: &L2,
        won: &[(&KeyNames, &str)],
        groups: &[Vec<usize>],
        held: &mut [bool],
    ) -> bool {
        let ttl = millis(self.core.config.lock_ttl);
        let asked: Vec<Vec<usize>> = groups
            .iter()
            .map(|group| group.iter().copied().filter(|&i| held[i]).collect())
            .collect();
        let extended = join_all(asked.iter().map(|group| {
            let locks: Vec<(&KeyNames, &str)> = group.iter().map(|&i| won[i]).collect();
            async move { on_valkey::extend_many(l2, &locks, ttl).await }
        }))
        .await;
        let counters = &self.core.stats.counters;
        let mut failed = false;
        for (group, extended) in asked.iter().zip(extended) {
            match extended {
                Ok(each) => {
                    for (&i, ours) in group.iter().zip(each) {
                        held[i] = ours;
                        bump(if ours {
                            &counters.lease_extended
                        } else {
                            &counters.lease_lost
                        });
                    }
                }
                Err(_) => {
                    failed = true;
                    counters.l2_errors.fetch_add(group.len() as u64, Relaxed);
                }
            }
        }
        failed
    }
}
