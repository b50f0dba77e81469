//! What a miss does on the caller's own task, before (and mostly instead of) a message to the
//! owner: it joins the id's current flight on its shard's [`Board`](crate::state::board), or
//! reads Valkey itself, or starts the flight itself, or asks the owner.
//!
//! ```text
//! L1 miss ─▶ board ─ current flight ─▶ join: wait on its cell (coalesced) ◀──────────────┐
//!              ├──── nothing in motion ─▶ read: GETRANGE value ── fresh ─▶ settle in L1   │
//!              │                                     └─ anything else ─┐                  │
//!              ├──── a read listed, or no Valkey ──────────────────────┴▶ admit: start ───┤
//!              │                                          the flight and launch it (leads)│
//!              └──── the id being written or landed, or its owner restarting ─▶ the owner ┘
//!                                                         (Fill: leads or joins a flight)
//! ```
//!
//! However a miss reaches its flight, it waits on the flight's cell ([`follow`]): one way to wait,
//! one place to count `coalesced`, one way to fly again (through the owner).
//!
//! A read that found no fresh copy is handed to the flight it starts: that flight's first
//! round trip is the lock attempt (which reads the value again in the same script), so a cold
//! miss costs three round trips in all — this read, the lock, and the fenced write that releases.
//!
//! The read is the fill's first step (`crate::flight::fill`), done where the caller already is: an L2 hit
//! then costs the caller one round trip to Valkey and no hand-off between tasks, which on a
//! loaded two-core machine is most of what the owner's path added (`docs/benchmarks.md`, "The
//! miss path, hop by hop"). It only ever *answers* a fresh value it settled into L1 (one a
//! change overtook may be newer than what L1 then keeps, so it goes to the flight); a missing,
//! stale, oversized or undecodable value (a `Deserialize` that panics included), or a Valkey
//! error, goes to the id's flight untouched and uncounted, and the flight does everything the
//! protocol says (the lock, the loser policies, the counters). The flight is admitted on the
//! board, by this caller as the owner would admit it (`admit_here`) or by the owner: either way
//! one flight per id, so the one source read per id is still admitted in one place, the id's
//! state.
//!
//! Nobody joins a read: a miss that finds one listed starts the id's flight instead, which
//! replaces the read (so a herd costs one read and one flight at most). No caller's answer therefore
//! depends on another caller's task being polled; a caller that drops its future, or keeps it
//! and stops polling, holds up nobody.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::error::Result;
use crate::fetched::{Answered, Fetched, Origin};
use crate::shard::flights::Admitted;
use crate::shard::owner::owner_ref::OwnerRef;
use crate::shard::owner::{OwnerMsg, Start, launch_fill};
use crate::state::board::{Admission, Entered, ReadId};
use crate::state::core::TableCore;
use crate::state::l1::L1Cache;
use crate::state::loser_policy::LoserPolicy;
use crate::state::stats::bump;
use crate::valkey::envelope;
use crate::wire::key::{Key, Value};

/// The miss path of a read of `id` (owned from here on: the board and the owner keep it).
pub(crate) fn miss<'a, K, V, Q>(
    core: &'a TableCore<K, V>,
    owner: &'a OwnerRef<K, V>,
    id: &Q,
    losers: Option<LoserPolicy<Arc<V>>>,
) -> BoxFuture<'a, Result<Answered<V>>>
where
    K: Key + Borrow<Q>,
    V: Value,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    if core.l2.is_none() {
        // Nothing to read: the miss joins or starts the flight at once (one look at the board).
        return ask(core, owner, id.to_owned(), losers, false).boxed();
    }
    let entered = core.board(id).enter(id, true, || id.to_owned());
    let id = id.to_owned();
    match entered {
        Entered::Joined(cell) => {
            let joined = Admitted::Flight { cell, leads: false };
            follow(core, owner, id, joined, losers).boxed()
        }
        Entered::Read(read) => {
            let reading = Reading { core, id, read };
            // A write that landed between this caller's look at L1 and its entry on the board
            // stored its entry before it lifted its mark: seeing the mark gone, look again.
            if let Some(entry) = L1Cache::get::<K>(&core.l1, &reading.id).filter(|e| core.trusts(e))
            {
                drop(reading);
                core.stats.l1_hits.incr();
                let hit = Fetched::new(entry.value, Origin::L1);
                return std::future::ready(Ok(Answered::own(hit))).boxed();
            }
            reading.run(owner, losers).boxed()
        }
        Entered::Owner => ask(core, owner, id, losers, false).boxed(),
    }
}

/// A miss admitted to the id's flight: it joins it or starts it (with `losers`, the caller's own
/// loser policy, if it starts one), on its own task when it may ([`admit_here`]), else through
/// the owner. `read`: this caller has just read Valkey and found no fresh copy, so a flight it
/// starts goes straight to the lock attempt, which reads the value again.
async fn ask<K: Key, V: Value>(
    core: &TableCore<K, V>,
    owner: &OwnerRef<K, V>,
    id: K,
    losers: Option<LoserPolicy<Arc<V>>>,
    read: bool,
) -> Result<Answered<V>> {
    let admitted = match admit_here(core, owner, &id, &losers, read) {
        Some(admitted) => admitted,
        None => admit(owner, id.clone(), losers.clone(), read).await?,
    };
    follow(core, owner, id, admitted, losers).await
}

/// The miss admitted on the caller's own task, as the owner would admit it now
/// ([`Board::admit`](crate::state::board::Board::admit)): it joins the current flight, takes
/// L1's fresh entry, or starts the flight and launches it itself, so a cold miss's answer
/// crosses two task hand-offs (to the flight and back), not three, and none if the fill never
/// waits ([`launch_fill`]). `None`: the owner admits it
/// (something of the id is in motion, its owner is restarting, or there is no runtime to launch
/// a flight on).
fn admit_here<K: Key, V: Value>(
    core: &TableCore<K, V>,
    owner: &OwnerRef<K, V>,
    id: &K,
    losers: &Option<LoserPolicy<Arc<V>>>,
    read: bool,
) -> Option<Admitted<V>> {
    tokio::runtime::Handle::try_current().ok()?;
    let actor = owner.of(id);
    let hit = || {
        let entry = L1Cache::get::<K>(&core.l1, id).filter(|e| core.trusts(e))?;
        core.stats.l1_hits.incr();
        Some(Fetched::new(entry.value, Origin::L1))
    };
    match core
        .board(id)
        .admit(id, actor.get_id().pid(), || id.clone(), hit)
    {
        Admission::Joined(cell) => Some(Admitted::Flight { cell, leads: false }),
        Admission::Hit(hit) => Some(Admitted::Hit(hit)),
        Admission::Launch(flight, cell) => {
            let start = Start {
                losers: losers.clone(),
                read,
                ..Start::default()
            };
            launch_fill(Arc::clone(owner.core()), actor, id.clone(), flight, start);
            Some(Admitted::Flight { cell, leads: true })
        }
        Admission::Owner => None,
    }
}

/// The owner's admission of a miss of `id`.
async fn admit<K: Key, V: Value>(
    owner: &OwnerRef<K, V>,
    id: K,
    losers: Option<LoserPolicy<Arc<V>>>,
    read: bool,
) -> Result<Admitted<V>> {
    owner
        .call(&id.clone(), move |reply| OwnerMsg::Fill {
            id,
            reply,
            losers,
            read,
        })
        .await
}

/// The one way a caller waits for a flight, however it was admitted to it (on the board, by
/// the owner, in a batch): on the flight's cell, for the flight's answer and whether it joined
/// (a joiner is shown `Coalesced`: [`Answered::shown`]). A flight that ends with no answer for
/// its callers (it changed nothing they may take) sends them through the owner again, as often
/// as that happens. Counted `coalesced` here, once per read: if the first flight it waits on is
/// another caller's.
pub(crate) async fn follow<K: Key, V: Value>(
    core: &TableCore<K, V>,
    owner: &OwnerRef<K, V>,
    id: K,
    mut admitted: Admitted<V>,
    losers: Option<LoserPolicy<Arc<V>>>,
) -> Result<Answered<V>> {
    if let Admitted::Flight { leads: false, .. } = admitted {
        bump(&core.stats.counters.coalesced);
    }
    loop {
        let (cell, leads) = match admitted {
            Admitted::Hit(hit) => return Ok(Answered::own(hit)),
            Admitted::Flight { cell, leads } => (cell, leads),
        };
        match cell.wait().await {
            Some(Ok(flight)) => {
                let joined = !leads;
                return Ok(Answered { flight, joined });
            }
            Some(Err(e)) => return Err(e),
            None => admitted = admit(owner, id.clone(), losers.clone(), false).await?,
        }
    }
}

/// A read of `id` listed on the board for this caller; withdrawn when dropped (done, or given up).
pub(crate) struct Reading<'a, K: Key, V> {
    core: &'a TableCore<K, V>,
    id: K,
    read: ReadId,
}

impl<'a, K: Key, V: Value> Reading<'a, K, V> {
    /// The read `read` of `id` the board listed for this caller.
    pub(crate) fn new(core: &'a TableCore<K, V>, id: K, read: ReadId) -> Self {
        Reading { core, id, read }
    }

    async fn run(
        self,
        owner: &OwnerRef<K, V>,
        losers: Option<LoserPolicy<Arc<V>>>,
    ) -> Result<Answered<V>> {
        let read = match self.read().await {
            Ok(hit) => return Ok(Answered::own(hit)),
            Err(unsettled) => unsettled == Unsettled::NotFresh,
        };
        // Not a fresh value: the id's flight takes it from here. The read stays listed until
        // then, so the misses meanwhile start that flight (not reads of their own), which
        // replaces it.
        ask(self.core, owner, self.id.clone(), losers, read).await
    }

    /// The value on Valkey if it is fresh and settled into L1 (no change overtook the read);
    /// else why not, with nothing touched.
    async fn read(&self) -> Result<Fetched<V>, Unsettled> {
        let core = self.core;
        let l2 = core.l2.as_ref().ok_or(Unsettled::Unread)?;
        if core.unsettled.holds(&self.id) {
            // The owner's flight repairs Valkey's copy before it reads it.
            return Err(Unsettled::Unread);
        }
        let names = core.names(&self.id).map_err(|_| Unsettled::Unread)?;
        let max = core.config.max_value_bytes;
        core.hear_marks().await;
        let read = crate::state::metrics::time_l2(&core.name, l2.get(&names, max));
        self.settle(read.await.map_err(|_| Unsettled::Unread)?, core.now_ms())
    }

    /// Whether this read may be made now: Valkey's copy of an id whose write failed here is
    /// repaired by the owner's flight before anyone reads it.
    pub(crate) fn may_read(&self) -> bool {
        self.core.l2.is_some() && !self.core.unsettled.holds(&self.id)
    }

    /// What the read found (`bytes`, the value key's) answered, if it is a fresh value and
    /// settled into L1; else why not, with nothing touched.
    /// `now_ms` is [`TableCore::now_ms`], read once for a batch of reads.
    pub(crate) fn settle(
        &self,
        bytes: Option<Vec<u8>>,
        now_ms: u64,
    ) -> Result<Fetched<V>, Unsettled> {
        let core = self.core;
        let bytes = bytes.ok_or(Unsettled::NotFresh)?;
        if bytes.len() > core.config.max_value_bytes {
            return Err(Unsettled::NotFresh);
        }
        // Undecodable bytes (a user `Deserialize` panicking on them among the causes): the
        // owner's flight meets them again, counts them and loads over them.
        let decoded = envelope::decode::<V>(
            &bytes,
            core.config.max_value_bytes,
            core.config.coding.custom(),
        );
        let env = decoded
            .ok()
            .filter(|env| core.is_current(env))
            .ok_or(Unsettled::NotFresh)?;
        let longest = core.config.longest_life(&env.value);
        let env = env.capped(longest);
        if !env.is_fresh(now_ms) {
            return Err(Unsettled::NotFresh);
        }
        let read_as = core.tracks_keys().then(|| envelope::fingerprint(&bytes));
        let entry = core.l2_entry_at(env, now_ms);
        let fetched = Fetched::new(Arc::clone(&entry.value), Origin::L2);
        // A read a change overtook does not answer: this process's L1 may keep an older value
        // than the one read (its own put's, while another process's later write has not been
        // pushed yet), and a process never answers newer than what it then serves. The owner's
        // flight answers instead, ordered after that change.
        let settled = core.board(&self.id).settle(&self.id, self.read, |state| {
            core.keep_in(state, self.id.clone(), entry, read_as);
        });
        if !settled {
            return Err(Unsettled::Overtaken);
        }
        bump(&core.stats.counters.l2_hits);
        Ok(fetched)
    }
}

/// Why a caller's read answered nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsettled {
    /// Valkey holds no fresh copy the caller may take (missing, stale, oversized, undecodable,
    /// or made a miss by a mark): the flight's lock attempt is the next read worth making.
    NotFresh,
    /// A fresh copy, but a change overtook the read: the flight reads again.
    Overtaken,
    /// Not read (no Valkey, a copy to repair first, a Valkey error).
    Unread,
}

impl<K: Key, V> Drop for Reading<'_, K, V> {
    fn drop(&mut self) {
        // Settled: a no-op. Otherwise the read ends (handed to the owner, or given up).
        self.core.board(&self.id).withdraw_read(&self.id, self.read);
    }
}
