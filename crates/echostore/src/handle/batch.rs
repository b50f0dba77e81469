//! Batch reads on the caller's side: [`Table::get_many`](crate::Table::get_many) and
//! [`Table::fetch_many`](crate::Table::fetch_many).
//!
//! ```text
//! each id: L1 ─ hit ─▶ answered (on the caller's task, as `get`)
//!   misses: board ─ flight listed ─▶ join it (coalesced)
//!             ├──── nothing listed ─▶ GETRANGE pipeline (per slot group) ─ fresh ─▶ settle, answer
//!             └──── anything else ─┬──────────────────────────────────────┘ not settled
//!                                  ▼
//!              the owner, in one message: each id joins its flight or starts one, and the
//!              started flights run as one batch ([`fill`]): one source call for them all
//! ```
//!
//! Each id follows the rules of a single miss ([`crate::handle::miss`]): only a fresh value settled into
//! L1 is answered from a read made here, and whatever was not goes to the owner's flights, so the
//! one source read per id stays the owner's (and the lock's) to admit.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::future::join_all;

use crate::error::{Error, Result};
use crate::fetched::{Answered, Fetched};
use crate::handle::miss::{Reading, follow};
use crate::handle::table::Table;
use crate::shard::flights::Admitted;
use crate::shard::flights::Reply;
use crate::shard::owner::owner_ref::OwnerRef;
use crate::shard::owner::{Gather, OwnerMsg};
use crate::state::board::Entered;
use crate::state::core::TableCore;
use crate::wire::key::{IntoId, Key, KeyNames, Value};

impl<K: Key, V: Value> Table<K, V> {
    /// The values of `ids` that exist, read as [`get`](Self::get) reads one but with one round
    /// trip to Valkey per step for the whole batch, and one call of the table's
    /// [`batch_loader`](crate::TableBuilder::batch_loader) for every id that has to be loaded
    /// (without one, the per-id loader for each, a few at a time).
    ///
    /// Ids in L1 answer at once; ids whose flight is running (a `get`, another batch) join it;
    /// the rest are read from Valkey (one pipeline), and those missing or stale are locked and loaded,
    /// with one source read per id per expiry across every process, as for single reads. Ids the
    /// batch loader leaves out are absent from the map. The first error of any other id is the
    /// answer; [`fetch_many`](Self::fetch_many) answers each id on its own.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> echostore::Result<()> {
    /// use std::collections::HashMap;
    /// use echostore::Store;
    ///
    /// let store = Store::builder().build().await?;
    /// let names = store
    ///     .table::<String, String>("names")
    ///     .batch_loader(|ids: Vec<String>| async move {
    ///         Ok::<_, std::io::Error>(ids.into_iter().map(|id| (id.clone(), id.to_uppercase())).collect::<HashMap<_, _>>())
    ///     })
    ///     .build()
    ///     .await?;
    /// let found = names.get_many(["ann", "bob"]).await?;
    /// assert_eq!(*found["bob"], "BOB");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get_many<I>(&self, ids: I) -> Result<HashMap<K, Arc<V>>>
    where
        I: IntoIterator,
        I::Item: IntoId<K>,
    {
        // L1 first, with no more work per id than a `get`'s hit: a page served from L1 pays only
        // for its map.
        let (core, owner) = self.parts();
        let ids = ids.into_iter();
        let mut found = HashMap::with_capacity(ids.size_hint().0);
        let mut missed = Vec::new();
        for id in ids.map(IntoId::into_id) {
            match crate::handle::lookup::hit(core, owner, &id) {
                Some(hit) => {
                    found.insert(id, hit.value);
                }
                None => missed.push(id),
            }
        }
        if missed.is_empty() {
            return Ok(found);
        }
        let answers = fetch_many(core, owner, missed, true);
        for (id, answer) in answers.await {
            match answer {
                Ok(fetched) => {
                    found.insert(id, fetched.value);
                }
                Err(e) if e.is_absent() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }

    /// Like [`get_many`](Self::get_many), with each id's own answer: its value and where it
    /// came from ([`Origin`](crate::Origin)), or its error. Ids the batch loader leaves out are
    /// left out here too; an error of the batch loader answers each id it was asked for, while
    /// ids served from L1 or Valkey are unaffected. Each id once, in the order first given.
    pub async fn fetch_many<I>(&self, ids: I) -> Vec<(K, Result<Fetched<V>>)>
    where
        I: IntoIterator,
        I::Item: IntoId<K>,
    {
        let ids = ids.into_iter().map(IntoId::into_id);
        let (core, owner) = self.parts();
        let answers = fetch_many(core, owner, ids, false);
        let mut answers = answers.await;
        answers.retain(|(_, answer)| !matches!(answer, Err(e) if e.is_absent()));
        answers
    }
}

/// Every id of `ids` (once each, in their first order) with its answer; `l1_missed`: the caller
/// has just looked each up in L1 and missed.
pub(crate) async fn fetch_many<K: Key, V: Value>(
    core: &TableCore<K, V>,
    owner: &OwnerRef<K, V>,
    ids: impl IntoIterator<Item = K>,
    l1_missed: bool,
) -> Vec<(K, Result<Fetched<V>>)> {
    let mut seen = HashSet::new();
    let ids: Vec<K> = ids
        .into_iter()
        .filter(|id| seen.insert(id.clone()))
        .collect();
    let mut answers: Vec<Option<Result<Fetched<V>>>> = Vec::with_capacity(ids.len());
    let (mut joins, mut reads, mut to_owner) = (Vec::new(), Vec::new(), Vec::new());
    for (i, id) in ids.iter().enumerate() {
        if !l1_missed && let Some(hit) = crate::handle::lookup::hit(core, owner, id) {
            answers.push(Some(Ok(hit)));
            continue;
        }
        answers.push(None);
        match core.board(id).enter(id, core.l2.is_some(), || id.clone()) {
            Entered::Joined(cell) => joins.push((i, Admitted::Flight { cell, leads: false })),
            Entered::Read(read) => reads.push((i, Reading::new(core, id.clone(), read))),
            Entered::Owner => to_owner.push(i),
        }
    }
    // The reads stay listed until the owner has answered the ids they hand over, so misses of
    // those ids meanwhile go to the owner too; dropping them withdraws the rest.
    let reads = read_here(core, &ids, reads, &mut answers, &mut to_owner).await;
    let from_owner = ask_many(core, owner, &ids, &to_owner);
    let from_flights = join_all(joins.into_iter().map(|(i, joined)| {
        let id = ids[i].clone();
        async move {
            let answer = follow(core, owner, id, joined, None).await;
            (i, answer.map(Answered::shown))
        }
    }));
    let (from_owner, from_flights) = futures::join!(from_owner, from_flights);
    drop(reads);
    for (i, answer) in from_owner.into_iter().chain(from_flights) {
        answers[i] = Some(answer);
    }
    ids.into_iter()
        .zip(answers)
        .map(|(id, answer)| (id, answer.unwrap_or(Err(Error::Stopped))))
        .collect()
}

/// The reads listed for this caller, made with one pipeline of bounded reads per slot group: each fresh value
/// settled into L1 is answered; the other ids are added to `to_owner`. Returns the reads, to be
/// kept until the owner has answered.
async fn read_here<'a, K: Key, V: Value>(
    core: &'a TableCore<K, V>,
    ids: &[K],
    reads: Vec<(usize, Reading<'a, K, V>)>,
    answers: &mut [Option<Result<Fetched<V>>>],
    to_owner: &mut Vec<usize>,
) -> Vec<(usize, Reading<'a, K, V>)> {
    let Some(l2) = &core.l2 else {
        to_owner.extend(reads.iter().map(|(i, _)| *i));
        return reads;
    };
    let mut readable = Vec::with_capacity(reads.len());
    for (n, (i, reading)) in reads.iter().enumerate() {
        match core.names(&ids[*i]) {
            Ok(names) if reading.may_read() => readable.push((n, names)),
            _ => to_owner.push(*i),
        }
    }
    let names: Vec<&KeyNames> = readable.iter().map(|(_, names)| names).collect();
    let groups = crate::flight::batch_fill::on_valkey::groups(l2, &names);
    core.hear_marks().await;
    let read = join_all(groups.iter().map(|group| {
        let keys: Vec<&KeyNames> = group.iter().map(|&g| names[g]).collect();
        let max = core.config.max_value_bytes;
        async move { crate::flight::batch_fill::on_valkey::read_values(l2, &keys, max).await }
    }));
    let read = crate::state::metrics::time_l2(&core.name, read).await;
    let now_ms = core.now_ms();
    for (group, values) in groups.iter().zip(read) {
        let values = values.ok();
        for (k, &g) in group.iter().enumerate() {
            let (i, reading) = &reads[readable[g].0];
            let bytes = values.as_ref().and_then(|v| v.get(k).cloned().flatten());
            match reading.settle(bytes, now_ms) {
                Ok(hit) => answers[*i] = Some(Ok(hit)),
                Err(_) => to_owner.push(*i),
            }
        }
    }
    reads
}

/// Hands the ids at `indices` to their shards' owners, one message each; each answer as it comes.
async fn ask_many<K: Key, V: Value>(
    core: &TableCore<K, V>,
    owner: &OwnerRef<K, V>,
    ids: &[K],
    indices: &[usize],
) -> Vec<(usize, Result<Fetched<V>>)> {
    if indices.is_empty() {
        return Vec::new();
    }
    // One message per shard, with that shard's ids.
    let mut by_shard: HashMap<usize, Vec<(K, Reply<V>)>> = HashMap::new();
    let mut waits = Vec::with_capacity(indices.len());
    for &i in indices {
        let (tx, rx) = ractor::concurrency::oneshot();
        let shard = owner.shard(&ids[i]);
        by_shard
            .entry(shard)
            .or_default()
            .push((ids[i].clone(), tx.into()));
        let id = ids[i].clone();
        waits.push(async move {
            match rx.await.unwrap_or(Err(Error::Stopped)) {
                Ok(admitted) => {
                    let answer = follow(core, owner, id, admitted, None).await;
                    (i, answer.map(Answered::shown))
                }
                Err(e) => (i, Err(e)),
            }
        });
    }
    // One gathering for every shard's flights, launched by the last share dropped: the caller
    // keeps none. A stopped owner drops the message, and with it every reply (each wait answers
    // `Stopped`) and its share.
    let gather = Gather::new(Arc::clone(owner.core()));
    let parts: Vec<_> = by_shard
        .into_iter()
        .map(|(shard, misses)| (shard, misses, Arc::clone(&gather)))
        .collect();
    drop(gather);
    for (shard, misses, gather) in parts {
        let _ = owner
            .current(shard)
            .cast(OwnerMsg::FillMany { misses, gather });
    }
    join_all(waits).await
}
