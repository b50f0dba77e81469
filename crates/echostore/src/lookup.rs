//! The future a read returns: L1 is checked by a plain function when the future is first polled,
//! and the owner is called only on a miss.
//!
//! Written by hand rather than as an `async fn` for the speed of the hit path. An `async fn`
//! whose miss branch awaits the owner compiled to a hit path that a tight loop of L1 hits over
//! 100k random keys ran at about 290 ns a hit on this machine class; this future, doing the same
//! work, at about 110 ns (the same probe, same table, same run; `docs/benchmarks.md`). A hit is a
//! chain of dependent cache misses (the hash slot, the entry, the value's reference count); the
//! CPU can overlap the next hit's misses with this one's only when the code between them is
//! small, and the `async fn` state machine was not.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures::future::BoxFuture;

use crate::error::Result;
use crate::fetched::Fetched;
use crate::key::{Key, Value};
use crate::table::Table;

/// One read of one id: an L1 hit answers on the first poll; a miss becomes a call to the owner,
/// which this future then drives.
///
/// Dropping it drops only this caller's place in the flight, never the flight.
pub(crate) struct Lookup<'a, K: Key, V: Value> {
    table: &'a Table<K, V>,
    id: &'a K,
    /// The call to the owner, once L1 has missed.
    miss: Option<BoxFuture<'a, Result<Fetched<V>>>>,
}

impl<'a, K: Key, V: Value> Lookup<'a, K, V> {
    pub(crate) fn new(table: &'a Table<K, V>, id: &'a K) -> Self {
        Lookup {
            table,
            id,
            miss: None,
        }
    }
}

impl<K: Key, V: Value> Future for Lookup<'_, K, V> {
    type Output = Result<Fetched<V>>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let miss = match &mut this.miss {
            Some(miss) => miss,
            None => {
                if let Some(hit) = this.table.hit(this.id) {
                    return Poll::Ready(Ok(hit));
                }
                this.miss.insert(this.table.miss(this.id))
            }
        };
        let answer = ready!(miss.as_mut().poll(cx));
        // Polled again after this, the lookup starts over rather than polling a spent call.
        this.miss = None;
        Poll::Ready(answer)
    }
}
