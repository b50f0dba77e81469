//! The future a read returns. L1 is read when the read is made, by a plain function on the
//! caller's task; a miss runs the miss path (`crate::handle::miss`) when the future is first
//! polled. A hit's answer is therefore L1 as it was at the call, however late the future is
//! awaited.
//!
//! Why not an `async fn`, or a future that reads L1 in its first poll: the L1 hit is a chain of
//! dependent cache misses (the hash slot, the entry, the value's reference count), and a loop of
//! hits runs fast only when the CPU can start the next hit's chain while this one's is
//! outstanding — which depends on the code around the lookup. Measured side by side, this shape
//! stays close to the lookup inline, where an `async fn` with an awaiting miss branch, or a
//! future that reads L1 in `poll`, costs several times as much a hit (the figures are in
//! `docs/notes/l1-hit-investigation.md`).
//!
//! The id is borrowed in whatever form the caller has (`&str` for a `String` key, as with
//! `HashMap::get`): the hit hashes and compares that form, and only a miss makes an owned key.

use std::borrow::Borrow;
use std::future::Future;
use std::hash::Hash;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures::future::BoxFuture;

use crate::error::Result;
use crate::fetched::{Answered, Fetched, Origin};
use crate::shard::owner::OwnerMsg;
use crate::shard::owner::owner_ref::OwnerRef;
use crate::state::core::TableCore;
use crate::state::l1::{Freshness, L1Cache};
use crate::wire::key::{Key, Value};

/// What a read answers with: the value alone (`get`) or the value and its origin (`fetch`).
pub(crate) trait Answer<V>: Sized {
    /// The answer out of a fetched value.
    fn answer(fetched: Fetched<V>) -> Self;
}

impl<V> Answer<V> for Fetched<V> {
    #[inline]
    fn answer(fetched: Fetched<V>) -> Self {
        fetched
    }
}

impl<V> Answer<V> for Arc<V> {
    #[inline]
    fn answer(fetched: Fetched<V>) -> Self {
        fetched.value
    }
}

/// One read of one id: an L1 hit already holds its answer; a miss starts the miss path when
/// first polled, which this future then drives.
///
/// Dropping it drops only this caller's place in the flight, never the flight. Polled again
/// after it has answered, it reads again.
pub(crate) struct Lookup<'a, K: Key, V: Value, Q: ?Sized, A> {
    core: &'a TableCore<K, V>,
    owner: &'a OwnerRef<K, V>,
    id: &'a Q,
    state: State<'a, V>,
    answer: PhantomData<fn() -> A>,
}

enum State<'a, V> {
    /// L1 answered when the read was made.
    Hit(Option<Fetched<V>>),
    /// L1 missed: the miss path, once polled.
    Miss(Option<BoxFuture<'a, Result<Answered<V>>>>),
}

impl<'a, K, V, Q, A> Lookup<'a, K, V, Q, A>
where
    K: Key + Borrow<Q>,
    V: Value,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    A: Answer<V>,
{
    /// Reads L1 now.
    #[inline]
    pub(crate) fn new(core: &'a TableCore<K, V>, owner: &'a OwnerRef<K, V>, id: &'a Q) -> Self {
        let state = match hit(core, owner, id) {
            Some(hit) => State::Hit(Some(hit)),
            None => State::Miss(None),
        };
        Lookup {
            core,
            owner,
            id,
            state,
            answer: PhantomData,
        }
    }
}

impl<K, V, Q, A> Future for Lookup<'_, K, V, Q, A>
where
    K: Key + Borrow<Q>,
    V: Value,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    A: Answer<V>,
{
    type Output = Result<A>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                State::Hit(hit) => match hit.take() {
                    Some(hit) => return Poll::Ready(Ok(A::answer(hit))),
                    // Answered already: read again.
                    None => {
                        *this = Lookup::new(this.core, this.owner, this.id);
                    }
                },
                State::Miss(call) => {
                    let call = call.get_or_insert_with(|| {
                        crate::handle::miss::miss(this.core, this.owner, this.id, None)
                    });
                    let answer = ready!(call.as_mut().poll(cx));
                    this.state = State::Hit(None);
                    return Poll::Ready(answer.map(|answer| A::answer(answer.shown())));
                }
            }
        }
    }
}

/// The L1 hit path, on the caller's task: a fresh entry for `id`, counted, or `None`. A hit
/// that draws an early refresh (only within the entry's early window, [`crate::state::l1::Entry::freshness`])
/// still answers at once, and casts the refresh to the owner.
#[inline]
pub(crate) fn hit<K, V, Q>(
    core: &TableCore<K, V>,
    owner: &OwnerRef<K, V>,
    id: &Q,
) -> Option<Fetched<V>>
where
    K: Key + Borrow<Q>,
    V: Value,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    hit_of(core, owner, id, core.l1.get(id)?)
}

/// [`hit`] with `id`'s L1 entry already read (a read that looks at the copy before it takes it:
/// `crate::handle::at_least`).
#[inline]
pub(crate) fn hit_of<K, V, Q>(
    core: &TableCore<K, V>,
    owner: &OwnerRef<K, V>,
    id: &Q,
    entry: crate::state::l1::Entry<V>,
) -> Option<Fetched<V>>
where
    K: Key + Borrow<Q>,
    V: Value,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    // One coarse clock read for both checks: the hit path's cost is its instructions.
    let now = crate::clock::coarse_ticks();
    if !core.vouch.holds_at(now) {
        return None;
    }
    match entry.freshness_at(now) {
        Freshness::Fresh => {}
        Freshness::Refresh => ask_refresh(owner, id, &entry.value),
        Freshness::Expired => {
            expired(core, id);
            return None;
        }
    }
    core.stats.l1_hits.incr();
    if let Some(audit) = &core.audit {
        audit.hit(id, &entry.value, || core.now_ms());
    }
    Some(Fetched::new(entry.value, Origin::L1))
}

/// Asks the owner to refresh `id` early; off the hot path (a draw in the last stretch won).
#[cold]
#[inline(never)]
fn ask_refresh<K, V, Q>(owner: &OwnerRef<K, V>, id: &Q, value: &Arc<V>)
where
    K: Key,
    V: Value,
    Q: ToOwned<Owned = K> + ?Sized,
{
    let (id, value) = (id.to_owned(), Arc::clone(value));
    // A stopped owner refreshes nothing; the value stays until its freshness ends.
    let _ = owner.of(&id).cast(OwnerMsg::Refresh { id, value });
}

/// An `Evicted { Expired }` event, for subscribers; off the hot path.
#[cold]
#[inline(never)]
fn expired<K, V, Q>(core: &TableCore<K, V>, id: &Q)
where
    K: Key + Borrow<Q>,
    V: Value,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    // An entry key tracking has yet to confirm is not fresh, but has not expired either.
    if core.events.heard() && !core.board(id).awaits_confirmation(id) {
        let cause = crate::events::EvictionCause::Expired;
        let kind = crate::events::EventKind::Evicted { cause };
        core.events.emit_owned(id.to_owned(), kind);
    }
}
