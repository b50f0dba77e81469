//! `peek_local` and `peek` read only what the caches hold: never the loader, never the lock,
//! never a flight or a loser's wait, and they leave L1 as it was.

use crate::common;

use std::time::Duration;

use common::{Source, raw, settled, store_on, table_on, until, until_async, valkey};
use echostore::Origin;
use redis::AsyncCommands;

/// A herd of peeks on two stores while one store's load of the id runs (and holds its lock):
/// every peek answers `None`, the source is read once, and the lock is still the loader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_of_peeks_during_a_load_reads_nothing() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::gated();
    let a = table_on(&store_on(&valkey.url()).await, "peeked", &source, |t| t).await;
    let b = table_on(&store_on(&valkey.url()).await, "peeked", &source, |t| t).await;

    let loading = {
        let a = a.clone();
        tokio::spawn(async move { a.get(&7).await })
    };
    until("the load started", || source.calls() == 1).await;
    let lock: Option<String> = conn.get("lock:peeked:{7}").await.expect("GET");
    assert!(lock.is_some(), "the loading store holds the lock");

    let peeks = (0..200).map(|n| {
        let table = if n % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(async move { (table.peek_local(&7), table.peek(&7).await) })
    });
    for peek in futures::future::join_all(peeks).await {
        let (local, shared) = peek.expect("task");
        assert!(local.is_none(), "nothing in L1 yet");
        assert!(shared.expect("peek").is_none(), "nothing on Valkey yet");
    }
    assert_eq!(source.calls(), 1, "no peek read the source");
    let still: Option<String> = conn.get("lock:peeked:{7}").await.expect("GET");
    assert_eq!(still, lock, "no peek took or released the lock");
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.coalesced, sa.lock_won, sa.lock_lost), (0, 1, 0));
    assert_eq!((sb.coalesced, sb.lock_won, sb.lock_lost), (0, 0, 0));
    assert_eq!((sb.source_reads, sb.poll_waits, sb.in_flight), (0, 0, 0));

    source.release();
    let loaded = loading.await.expect("task").expect("the load");
    assert_eq!(*loaded, "value-7-1");
    settled(&a).await;

    // Now cached: A peeks its L1; B peeks Valkey's copy and keeps it out of its own L1.
    assert_eq!(
        a.peek_local(&7).as_deref().map(String::as_str),
        Some("value-7-1")
    );
    let from_a = a.peek(&7).await.expect("peek").expect("cached");
    assert_eq!(
        (from_a.value.as_str(), from_a.origin),
        ("value-7-1", Origin::L1)
    );
    let from_b = b.peek(&7).await.expect("peek").expect("on Valkey");
    assert_eq!(
        (from_b.value.as_str(), from_b.origin),
        ("value-7-1", Origin::L2)
    );
    assert!(b.peek_local(&7).is_none(), "a peek leaves L1 as it was");
    assert_eq!(b.stats().l2_hits, 0, "a peek counts nothing");
    assert_eq!(source.calls(), 1);
}

/// A copy past its freshness is not a peek's answer, though it is still servable as stale, and
/// neither is a copy a `clear` made a miss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peek_answers_only_fresh_current_copies() {
    let valkey = valkey();
    let source = Source::open();
    let store = store_on(&valkey.url()).await;
    let short = table_on(&store, "short", &source, |t| {
        t.ttl(Duration::from_millis(200))
            .jitter(0.0)
            .stale_for(Duration::from_secs(60))
    })
    .await;
    short.get(&1).await.expect("load");
    assert!(short.peek(&1).await.expect("peek").is_some());
    until_async("the copy's freshness ended", async || {
        short.peek(&1).await.expect("peek").is_none()
    })
    .await;
    assert!(
        short.peek_local(&1).is_none(),
        "stale in L1 is not a peek's"
    );

    let cleared = table_on(&store, "cleared", &source, |t| t).await;
    cleared.get(&2).await.expect("load");
    let other = table_on(&store_on(&valkey.url()).await, "cleared", &source, |t| t).await;
    assert!(other.peek(&2).await.expect("peek").is_some(), "on Valkey");
    cleared.clear().await.expect("clear");
    assert!(cleared.peek(&2).await.expect("peek").is_none());
    // The other store hears of the clear's mark by its push: a peek there misses once it has.
    until_async("the clear's mark reaches the other store", async || {
        other.peek(&2).await.expect("peek").is_none()
    })
    .await;
    assert_eq!(source.calls(), 2, "peeks read nothing: two loads in all");
}

/// Without Valkey, `peek` is `peek_local`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_valkey_a_peek_reads_l1_alone() {
    let source = Source::open();
    let table = common::local_table("alone", &source, |t| t).await;
    assert!(table.peek(&3).await.expect("peek").is_none());
    table.get(&3).await.expect("load");
    let seen = table.peek(&3).await.expect("peek").expect("in L1");
    assert_eq!(seen.origin, Origin::L1);
    assert_eq!(source.calls(), 1);
}
