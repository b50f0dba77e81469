//! Coherence: a write anywhere — a `put` or `invalidate` in another store, a foreign `SET` or
//! `DEL` — reaches every store's L1 through Valkey's invalidation pushes, long before its ttl; a
//! lost tracking connection flushes L1 and recovers; `coherence(false)` keeps L1 as it was.

mod common;

use std::time::Duration;

use common::{
    Source, coherent_store, raw, settled, table_on, until, until_async, until_stats, valkey,
};
use echostore::{Origin, Store, Table};
use redis::AsyncCommands;

const TABLE: &str = "coh";
const VALUE: &str = "coh:{1}";

/// Kills every store's tracking connection (named `echostore-tracking`), and only those.
async fn kill_tracking_connections(conn: &mut redis::aio::MultiplexedConnection) -> usize {
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .expect("CLIENT LIST");
    let ids: Vec<String> = clients
        .lines()
        .filter(|line| {
            line.split(' ')
                .any(|field| field == "name=echostore-tracking")
        })
        .filter_map(|line| {
            line.split(' ')
                .find_map(|f| f.strip_prefix("id="))
                .map(str::to_owned)
        })
        .collect();
    for id in &ids {
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query_async(conn)
            .await
            .expect("CLIENT KILL ID");
    }
    ids.len()
}

/// A table whose L1 keeps values a minute: only coherence can make it drop one sooner.
async fn long_lived(store: &Store, source: &Source) -> Table<u64, String> {
    table_on(store, TABLE, source, |t| {
        t.ttl(Duration::from_secs(60)).jitter(0.0)
    })
    .await
}

/// Loads id 1 into `table`'s L1 and checks that the next read is an L1 hit.
async fn warm(table: &Table<u64, String>) -> String {
    table.get(&1).await.expect("loaded");
    let hit = table.fetch(&1).await.expect("hit");
    assert_eq!(hit.origin, Origin::L1);
    hit.value.to_string()
}

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
    assert_eq!(answer.value.as_str(), "value-1-1");
    settled(&reader).await;
    assert_eq!(
        reader.stats().l1_len,
        0,
        "the overtaken fill's value is not kept"
    );
    let f = reader.fetch(&1).await.expect("re-read");
    assert_eq!((f.origin, f.value.as_str()), (Origin::L2, "from-put"));
}

/// Killing the tracking connection flushes L1 at once; tracking comes back and works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_tracking_connection_flushes_and_recovers() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let store = coherent_store(&valkey.url(), None).await;
    let reader = long_lived(&store, &source).await;
    let writer = long_lived(&coherent_store(&valkey.url(), None).await, &source).await;
    warm(&reader).await;

    let killed = kill_tracking_connections(&mut conn).await;
    assert_eq!(killed, 2, "both stores' tracking connections were killed");
    until_stats(&reader, "the loss flushed L1", |s| s.coherence_flushes >= 1).await;
    until("tracking is back", || store.is_coherent()).await;
    until_stats(&reader, "flushed again once back", |s| {
        s.coherence_flushes >= 2
    })
    .await;
    assert_eq!(
        reader.stats().l1_len,
        0,
        "nothing from before the loss is trusted"
    );

    assert_eq!(
        warm(&reader).await,
        "value-1-1",
        "re-read from Valkey, not the source"
    );
    let before = reader.stats().invalidations;
    writer.put(&1, "after the loss".into()).await.expect("put");
    until_stats(&reader, "pushes flow again", |s| s.invalidations > before).await;
    assert_eq!(*reader.get(&1).await.expect("re-read"), "after the loss");
    assert_eq!(source.calls(), 1);
    settled(&reader).await;
}

/// A Valkey restart (empty) is a lost connection too: L1 is flushed, and reads reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valkey_restart_flushes_l1() {
    let mut valkey = valkey();
    let source = Source::open();
    let store = coherent_store(&valkey.url(), None).await;
    let reader = long_lived(&store, &source).await;
    warm(&reader).await;
    valkey.restart().expect("restart");
    until_stats(&reader, "the restart flushed L1", |s| {
        s.coherence_flushes >= 1
    })
    .await;
    until("tracking is back", || store.is_coherent()).await;
    let f = reader.fetch(&1).await.expect("reload");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Loaded, "value-1-2"));
    settled(&reader).await;
}

/// With coherence off, L1 keeps serving its copy until its ttl, whatever another store writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coherence_off_keeps_l1_as_it_was() {
    let valkey = valkey();
    let source = Source::open();
    let writer = long_lived(&coherent_store(&valkey.url(), None).await, &source).await;
    let store = Store::builder()
        .valkey(valkey.url())
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
