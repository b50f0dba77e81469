//! The batch flight: one group of the owner's flights, one per id, run as the single-id fill
//! ([`crate::flight::fill`]) runs each, but with one round trip per step for all of them and one
//! source call for all the ids it has to load.
//!
//! ```text
//! acquire-many (per slot group: SET lock NX PX and GETRANGE value, for each id)
//!    ├─ value fresh ─▶ L2 hit (a won lock is released with the writes below)
//!    ├─ won  ─┐
//!    ├─ Valkey away or refusing ─┐ (in-process, as a degraded fill: unsettled, L1 capped)
//!    │        ▼                  ▼
//!    │   one batch loader call for them all, under the lease of every won lock
//!    │        ▼
//!    │   write-many (per slot group: fenced write and release, for each id)
//!    └─ lost ─▶ the loser policy (serve stale, default, fail fast), or wait as one group:
//!               poll-many per slot group, woken by pushes; ids whose lock went contend again
//! ```
//!
//! Every per-id rule of the single fill holds: an id is loaded only by the process holding its
//! lock; its write is fenced by that lock and ordered like any write; an id whose last write
//! failed here (unsettled) takes the single fill's path; the ids whose locks another process
//! holds wait together ([`lost_ids`]). The
//! flights are the owner's, one per id, so a `get` of an id a batch is loading joins it, and a
//! batch joins the flights already running for its ids. What a batch does not do per id: serve a
//! stale copy at the soft timeout (a batch loads as one call; fail-safe still applies per id).
//!
//! This module owns the steps' order and each member's state through them; the source call and
//! the lease over it are [`source`]'s, and what a loaded member is written with and lands with
//! is [`landing`]'s.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures::FutureExt;
use futures::future::join_all;

use self::on_valkey::{Fate, ToWrite, Wrote};
use crate::error::{Error, Result};
use crate::flight::fill::Fill;
use crate::flight::losers;
use crate::state::core::{TableCore, millis};
use crate::state::flight_id::FlightId;
use crate::state::stale::{Landing, Signal, Stale};
use crate::state::stats::bump;
use crate::valkey::envelope::{self, Envelope};
use crate::valkey::l2::L2;
use crate::valkey::lock;
use crate::wire::key::{Key, KeyNames, Value};

mod landing;
mod lost_ids;
pub(crate) mod on_valkey;
mod source;

/// Where a batch sends each id's landing, and each id's signals (as the owner's flights do).
pub(crate) trait Report<K, V>: Send + Sync {
    fn landed(&self, id: K, flight: FlightId, outcome: Result<Landing<V>>);
    fn signal(&self, id: &K, flight: FlightId, signal: Signal<V>);
}

/// An id and the flight it is for.
type Flown<K> = (K, FlightId);

/// One id of the batch, as it goes through the steps.
struct Member<K, V> {
    id: K,
    flight: FlightId,
    names: KeyNames,
    token: String,
    /// The lock is ours (to write with, or release).
    won: bool,
    /// Load it: won, or Valkey could not be asked (`degraded`).
    load: bool,
    /// Answered from Valkey already.
    landed: bool,
    degraded: bool,
    /// The batch loader left it out: the row is gone, and its copy on Valkey goes with the lock.
    gone: bool,
    stale: Option<Stale<V>>,
    /// The generation its write is stamped with (`crate::state::marks`): taken before its lock
    /// attempt, and again when its source read begins (after any wait for the budget or a slot).
    stamp: AtomicU64,
    /// Taken before its lock attempt is sent: a write that drops that lock began after it.
    asked_from: Instant,
}

impl<K, V> Member<K, V> {
    /// The generation its write is stamped with.
    fn stamp(&self) -> u64 {
        self.stamp.load(Ordering::SeqCst)
    }

    /// Its source read begins under generation `at` (never moving its stamp back).
    fn read_at(&self, at: u64) {
        self.stamp.fetch_max(at, Ordering::SeqCst);
    }
}

/// The flights of one batch.
pub(crate) struct BatchFill<'a, K, V> {
    core: &'a TableCore<K, V>,
    report: &'a dyn Report<K, V>,
}

impl<'a, K: Key, V: Value> BatchFill<'a, K, V> {
    pub(crate) fn new(core: &'a TableCore<K, V>, report: &'a dyn Report<K, V>) -> Self {
        BatchFill { core, report }
    }

    /// Runs the flights of `ids` to their landings: rounds of contention, until no id is left
    /// to contend again (a lost lock that went with no fresh value).
    pub(crate) async fn run(&self, ids: Vec<(K, FlightId)>) {
        bump(&self.core.stats.counters.batches);
        let Some(l2) = &self.core.l2 else {
            return self.here(ids).await;
        };
        let mut deadline = None;
        let mut ids = ids;
        self.core.hear_marks().await;
        while !ids.is_empty() {
            ids = self.round(l2, ids, &mut deadline).await;
        }
    }

    /// One round: acquire-many for every id, then the won ones loaded in one source call and
    /// written, the lost ones waiting as one group (their policy's wait ending at `deadline`,
    /// set by the first round that loses); returns the ids to contend for again.
    async fn round(
        &self,
        l2: &L2,
        ids: Vec<(K, FlightId)>,
        deadline: &mut Option<tokio::time::Instant>,
    ) -> Vec<(K, FlightId)> {
        let (mut members, alone) = self.members(ids);
        let names: Vec<&KeyNames> = members.iter().map(|m| &m.names).collect();
        let groups = on_valkey::groups(l2, &names);
        let acquired = join_all(groups.iter().map(|g| self.acquire(l2, &members, g))).await;
        for (group, acquired) in groups.iter().zip(acquired) {
            self.acquired(&mut members, group, acquired);
        }
        let (lost, members): (Vec<_>, Vec<_>) = members
            .into_iter()
            .partition(|m| !m.landed && !m.won && !m.load);
        let alone = join_all(alone.into_iter().map(|(id, flight)| self.alone(id, flight)));
        let batch = self.load_and_write(l2, members);
        let (_, mut again, polled) = futures::join!(alone, batch, self.lost(l2, lost, deadline));
        again.extend(polled);
        again
    }

    /// The members of a round, each with a new token and the generation its write is stamped
    /// with; and the ids that take the single fill (Valkey's copy of an id whose write failed
    /// here is repaired by its own fill). An id without key names lands its error at once.
    fn members(&self, ids: Vec<(K, FlightId)>) -> (Vec<Member<K, V>>, Vec<Flown<K>>) {
        let (mut members, mut alone) = (Vec::with_capacity(ids.len()), Vec::new());
        let stamp = self.core.marks.stamp();
        for (id, flight) in ids {
            match self.core.names(&id) {
                Ok(_) if self.core.unsettled.holds(&id) => alone.push((id, flight)),
                Ok(names) => members.push(Member {
                    id,
                    flight,
                    names,
                    token: lock::new_token(),
                    won: false,
                    load: false,
                    landed: false,
                    degraded: false,
                    gone: false,
                    stale: None,
                    stamp: AtomicU64::new(stamp),
                    asked_from: Instant::now(),
                }),
                Err(e) => self.report.landed(id, flight, Err(e)),
            }
        }
        (members, alone)
    }

    /// What one group's acquire-many found: fresh values land as L2 hits, won locks are to load,
    /// and a group Valkey could not be asked about loads in-process (degraded).
    fn acquired(
        &self,
        members: &mut [Member<K, V>],
        group: &[usize],
        acquired: Result<Vec<on_valkey::Acquired>>,
    ) {
        let counters = &self.core.stats.counters;
        let seen = match acquired {
            Ok(seen) => seen,
            Err(e) => {
                bump(&counters.l2_errors);
                tracing::debug!(table = %self.core.name, error = %e, "batch acquire failed: loading in-process");
                for &i in group {
                    members[i].load = true;
                    members[i].degraded = true;
                }
                return;
            }
        };
        for (&i, a) in group.iter().zip(seen) {
            let m = &mut members[i];
            m.won = a.won;
            match self.decode(a.value) {
                Some(env) if env.is_fresh(self.core.now_ms()) => {
                    bump(&counters.l2_hits);
                    let hit = self.core.l2_filled(env);
                    self.report
                        .landed(m.id.clone(), m.flight, Ok(Landing::Filled(hit)));
                    m.landed = true;
                }
                seen => {
                    m.stale = seen.and_then(|env| self.stale(env));
                    m.load = a.won;
                    if a.won {
                        bump(&counters.lock_won);
                    }
                }
            }
        }
    }

    /// The acquire-many of one group.
    async fn acquire(
        &self,
        l2: &L2,
        members: &[Member<K, V>],
        group: &[usize],
    ) -> Result<Vec<on_valkey::Acquired>> {
        let config = &self.core.config;
        let keys: Vec<(&KeyNames, &str)> = group
            .iter()
            .map(|&i| (&members[i].names, members[i].token.as_str()))
            .collect();
        on_valkey::acquire_many(l2, &keys, millis(config.lock_ttl), config.max_value_bytes).await
    }

    /// One id on its own: the single fill.
    async fn alone(&self, id: K, flight: FlightId) {
        let signals = |signal| self.report.signal(&id, flight, signal);
        let fill = Fill::new(self.core, &id, &signals);
        let outcome = AssertUnwindSafe(fill.run())
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Err(Error::LoaderPanicked("the fill panicked".into())));
        self.report.landed(id, flight, outcome);
    }

    /// Loads every member that needs it in one source call (under the lease of the won locks),
    /// then writes and releases them, group by group; returns the members whose lock was lost
    /// before the source call ([`BatchFill::queued`]), to contend for again.
    async fn load_and_write(&self, l2: &L2, mut members: Vec<Member<K, V>>) -> Vec<(K, FlightId)> {
        let (mut loaded, lost) = self.load_leased(l2, &members).await;
        let (lost, kept): (Vec<_>, Vec<_>) = members
            .into_iter()
            .partition(|m| m.load && lost.contains(&m.flight));
        members = kept;
        let again = lost.into_iter().map(|m| (m.id, m.flight)).collect();
        let mut landings: Vec<Option<Result<Landing<V>>>> = Vec::with_capacity(members.len());
        let mut envelopes: Vec<Option<Vec<u8>>> = Vec::with_capacity(members.len());
        let mut lives = Vec::with_capacity(members.len());
        let mut failed = Vec::with_capacity(members.len());
        for m in &mut members {
            let loaded = loaded.remove(&m.id);
            failed.push(matches!(&loaded, Some(Err(e)) if !e.is_absent()).then_some(true));
            let (landing, envelope, life) = self.prepare(l2, m, loaded);
            landings.push(landing);
            envelopes.push(envelope);
            lives.push(life);
        }
        let written = self.write_groups(l2, &members, &envelopes, &lives).await;
        let mut fenced_out = Vec::new();
        for (indices, wrote) in written {
            for (n, &i) in indices.iter().enumerate() {
                let wrote = wrote
                    .as_ref()
                    .map(|w| w.get(n).copied().unwrap_or(Wrote::NotOurs));
                if let Some(ours) = &mut failed[i] {
                    *ours = !matches!(wrote, Ok(Wrote::NotOurs));
                }
                if matches!(wrote, Ok(Wrote::NotOurs)) && (lives[i].is_some() || members[i].gone) {
                    fenced_out.push(i);
                }
                let written_as = envelopes[i]
                    .as_deref()
                    .filter(|_| self.core.tracks_keys())
                    .map(envelope::fingerprint);
                let unknown = wrote.is_err() && (lives[i].is_some() || members[i].gone);
                if !matches!(wrote, Ok(Wrote::Written)) {
                    self.not_written(&members[i], envelopes[i].as_deref());
                }
                landings[i] = match self.written(wrote, &mut lives[i], written_as) {
                    Some(landing) => Some(landing),
                    None => landings[i].take(),
                }
                .map(|landing| match unknown {
                    true => self.unknown_fate(l2, &members[i], landing),
                    false => landing,
                });
            }
        }
        self.fail_safe(&mut members, &mut landings, &failed);
        self.fenced_out(l2, &members, &mut landings, fenced_out)
            .await;
        for (m, landing) in members.iter().zip(landings) {
            if let Some(landing) = landing {
                self.report.landed(m.id.clone(), m.flight, landing);
            }
        }
        again
    }

    /// Members whose lock a write elsewhere dropped while they loaded answer what Valkey holds
    /// now when it is fresh, or what the lock's new holder writes, as the single fill does
    /// (`Fill::fenced_out`): later reads there find that copy, so answering the loaded row,
    /// when newer, would make them go back. With neither, the row answers the callers seated by
    /// the member's lock attempt, and the later ones fly again: the write that dropped the lock
    /// may be unheard here. A row found gone answers none of them (every caller flies again): a
    /// gone row carries no cutoff, and the write may have re-created it.
    async fn fenced_out(
        &self,
        l2: &L2,
        members: &[Member<K, V>],
        landings: &mut [Option<Result<Landing<V>>>],
        fenced_out: Vec<usize>,
    ) {
        // Each waits on its own (a new holder's load may take up to its lock's ttl): together.
        let found = join_all(
            fenced_out
                .into_iter()
                .map(|i| async move { (i, self.after_fenced_out(l2, &members[i]).await) }),
        );
        for (i, found) in found.await {
            let row = landings[i].take();
            landings[i] = match found {
                Some(env) => {
                    bump(&self.core.stats.counters.l2_hits);
                    Some(Ok(Landing::Filled(self.core.l2_filled(env))))
                }
                None => row.map(|row| match row {
                    Err(e) if e.is_absent() => Ok(Landing::FlyAgain),
                    row => row.map(|row| row.for_callers_before(members[i].asked_from)),
                }),
            };
        }
    }

    /// What a fenced-out member finds on Valkey ([`losers::after_fenced_out`]).
    async fn after_fenced_out(&self, l2: &L2, m: &Member<K, V>) -> Option<Envelope<V>> {
        let reading = || self.report.signal(&m.id, m.flight, Signal::Reading);
        let decode = |bytes| self.decode(bytes);
        losers::after_fenced_out(self.core, l2, (&m.id, &m.names), reading, decode).await
    }

    /// The table's source budget is spent: members with a stale copy answer it now, while the
    /// batch's call waits for a lease (a budget never keeps a stale copy from a read).
    fn stale_meanwhile(&self, loading: &[&Member<K, V>]) {
        for m in loading {
            if let Some(served) = m.stale.as_ref().and_then(Stale::answer) {
                crate::state::stats::bump(&self.core.stats.counters.stale_served);
                self.report
                    .signal(&m.id, m.flight, Signal::Early(served.fetched));
            }
        }
    }

    /// The write-many of every group, at once: for each group, the members it wrote for (those
    /// whose lock was won) and what each write did. A group's write-many that failed released
    /// nothing: its locks are released again in the background (`lock::release_later`).
    async fn write_groups(
        &self,
        l2: &L2,
        members: &[Member<K, V>],
        envelopes: &[Option<Vec<u8>>],
        lives: &[Option<(crate::state::core::Life, Arc<V>)>],
    ) -> Vec<(Vec<usize>, Result<Vec<Wrote>>)> {
        let groups = groups_of(l2, members);
        join_all(groups.iter().map(|group| {
            let won: Vec<usize> = group.iter().copied().filter(|&i| members[i].won).collect();
            let writes: Vec<ToWrite<'_>> = won
                .iter()
                .map(|&i| ToWrite {
                    names: &members[i].names,
                    token: &members[i].token,
                    fate: match (&envelopes[i], &lives[i]) {
                        (Some(envelope), Some((life, _))) => Fate::Write {
                            envelope,
                            px: life.physical_ms(),
                        },
                        _ if members[i].gone => Fate::Delete,
                        _ => Fate::Leave,
                    },
                    others: match envelopes[i] {
                        Some(_) => self.core.other_copies(&members[i].id),
                        None => Vec::new(), // a release only
                    },
                })
                .collect();
            async move {
                let wrote = on_valkey::write_many(l2, &writes).await;
                if wrote.is_err() {
                    // The write-many releases with the writes: failed, it released nothing.
                    let ttl_ms = crate::state::core::millis(self.core.config.lock_ttl);
                    for &i in &won {
                        let (names, token) = (&members[i].names, &members[i].token);
                        crate::valkey::lock::release_later(l2, names, token, ttl_ms);
                    }
                }
                (won, wrote)
            }
        }))
        .await
    }

    /// Decodes what Valkey held for one id; oversized or undecodable bytes are a counted miss.
    fn decode(&self, bytes: Option<Vec<u8>>) -> Option<Envelope<V>> {
        crate::flight::fill::decode_counted(self.core, &bytes?)
    }

    fn stale(&self, env: Envelope<V>) -> Option<Stale<V>> {
        Stale::from_envelope(env, self.core.config.stale_for, self.core.now_ms())
    }
}

/// The write groups of the members left after the lost ones went to their own fills.
fn groups_of<K, V>(l2: &L2, members: &[Member<K, V>]) -> Vec<Vec<usize>> {
    let names: Vec<&KeyNames> = members.iter().map(|m| &m.names).collect();
    on_valkey::groups(l2, &names)
}
