//! Coherence: a write anywhere — a `put` or `invalidate` in another store, a foreign `SET` or
//! `DEL` — reaches every store's L1 through Valkey's invalidation pushes, long before its ttl; a
//! lost tracking connection flushes L1 and recovers; `coherence(false)` keeps L1 as it was.

use crate::common;

use common::{
    Source, builder_on, coherent_store, long_lived, raw, settled, until, until_async, until_stats,
    valkey, warm,
};
use echostore::Origin;
use redis::AsyncCommands;

const VALUE: &str = "coh:{1}";

/// A put in one store replaces the value in every other store's L1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_reaches_every_other_l1() {
    let valkey = valkey();
    let source = Source::open();
    let writer = long_lived(&coherent_store(&valkey.url(), None).await, &source).await;
    let readers = [
        long_lived(&coherent_store(&valkey.url(), None).await, &source).await,
        long_lived(&coherent_store(&valkey.url(), None).await, &source).await,
    ];
    for reader in &readers {
        assert_eq!(warm(reader).await, "value-1-1");
    }
    writer.put(&1, "from-put".into()).await.expect("put");
    for reader in &readers {
        // Until the push arrives the reader answers its old copy from L1; then, from Valkey, the
        // put's value (other pushes — another store's fill — may come first, so no count is waited on).
        until_async("the put reached the reader's L1", async || {
            let f = reader.fetch(&1).await.expect("read");
            match f.value.as_str() {
                "from-put" => {
                    assert_eq!(f.origin, Origin::L2, "re-read from Valkey");
                    true
                }
                old => {
                    assert_eq!((f.origin, old), (Origin::L1, "value-1-1"));
                    false
                }
            }
        })
        .await;
        assert!(reader.stats().invalidations >= 1);
        settled(reader).await;
    }
    assert_eq!(
        source.calls(),
        1,
        "the put, not the source, answered the readers"
    );
}

/// An invalidate in one store drops the id from every other L1: the next read reloads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidate_reaches_every_other_l1() {
    let valkey = valkey();
    let source = Source::open();
    let writer = long_lived(&coherent_store(&valkey.url(), None).await, &source).await;
    let reader = long_lived(&coherent_store(&valkey.url(), None).await, &source).await;
    warm(&reader).await;
    writer.invalidate(&1).await.expect("invalidate");
    until_stats(&reader, "the push reached the reader", |s| {
        s.invalidations >= 1
    })
    .await;
    let f = reader.fetch(&1).await.expect("reloaded");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Loaded, "value-1-2"));
    assert_eq!(source.calls(), 2);
    settled(&reader).await;
}

/// A foreign `DEL` or `SET` of the value key (an operator, a script) reaches L1 too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_writes_reach_l1() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let reader = long_lived(&coherent_store(&valkey.url(), None).await, &source).await;
    warm(&reader).await;

    let _: i64 = conn.del(VALUE).await.expect("DEL");
    until_stats(&reader, "the DEL's push", |s| s.invalidations >= 1).await;
    assert_eq!(
        reader.fetch(&1).await.expect("reload").origin,
        Origin::Loaded
    );
    assert_eq!(reader.fetch(&1).await.expect("hit").origin, Origin::L1);

    let before = reader.stats().invalidations;
    let _: () = conn.set(VALUE, "not an envelope").await.expect("SET");
    until_stats(&reader, "the SET's push", |s| s.invalidations > before).await;
    let f = reader.fetch(&1).await.expect("reload");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Loaded, "value-1-3"));
    assert!(
        reader.stats().decode_errors >= 1,
        "the planted bytes were read and refused"
    );
    settled(&reader).await;
}

/// A fill that read the old state before a remote change does not keep its value in L1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_overtaken_by_a_remote_change_is_not_kept() {
    let valkey = valkey();
    let source = Source::gated();
    let writer = long_lived(&coherent_store(&valkey.url(), None).await, &Source::open()).await;
    let reader = long_lived(&coherent_store(&valkey.url(), None).await, &source).await;
    let fill = tokio::spawn({
        let reader = reader.clone();
        async move { reader.fetch(&1).await }
    });
    until("the reader's fill reads the source", || source.calls() == 1).await;
    // A put elsewhere changes the value key while the reader's fill loads.
    writer
        .put(&1, "from-put".into())
        .await
        .expect("a remote put");
    until_stats(&reader, "the push reached the reader", |s| {
        s.invalidations >= 1
    })
    .await;
    source.release();
    let answer = fill
        .await
        .expect("task")
        .expect("its own waiter is answered");
    // Fenced out by the put, the fill answers what Valkey holds (what every later read finds).
    assert_eq!(answer.value.as_str(), "from-put");
    settled(&reader).await;
    assert_eq!(
        reader.stats().l1_len,
        0,
        "the overtaken fill's value is not kept"
    );
    let f = reader.fetch(&1).await.expect("re-read");
    assert_eq!((f.origin, f.value.as_str()), (Origin::L2, "from-put"));
}

/// With coherence off, L1 keeps serving its copy until its ttl, whatever another store writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coherence_off_keeps_l1_as_it_was() {
    let valkey = valkey();
    let source = Source::open();
    let writer = long_lived(&coherent_store(&valkey.url(), None).await, &source).await;
    let store = builder_on(&valkey.url())
        .coherence(false)
        .require_valkey(true)
        .build()
        .await
        .expect("store");
    assert!(!store.is_coherent());
    let reader = long_lived(&store, &source).await;
    warm(&reader).await;
    writer.put(&1, "from-put".into()).await.expect("put");
    let f = reader.fetch(&1).await.expect("hit");
    assert_eq!((f.origin, f.value.as_str()), (Origin::L1, "value-1-1"));
    assert_eq!(reader.stats().invalidations, 0);
    settled(&reader).await;
}
