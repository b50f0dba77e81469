//! A dropped table's prefixes leave the store's tracking connection: a process that starts and
//! drops tables (one per tenant, per test, per request) does not pile prefixes up on Valkey,
//! where every new `CLIENT TRACKING … PREFIX` is checked against all the others. The tables
//! still tracked lose no push while the prefixes change.

use crate::common;

use std::time::Duration;

use common::{Source, coherent_store, coherent_table, raw, table_on, until, until_async, valkey};
use echostore::{Origin, Table};
use redis::AsyncCommands;

/// How many prefixes Valkey tracks for broadcast clients (`INFO stats`,
/// `tracking_total_prefixes`): with one store on the server, two per table it tracks.
async fn tracked_prefixes(conn: &mut common::RawConn) -> u64 {
    common::info_count(conn, "stats", "tracking_total_prefixes").await
}

/// Dropping tables removes their prefixes, many times over, and leaves the kept table's
/// coherence working without a flush.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_tables_prefixes_are_removed() {
    let valkey = valkey();
    let url = valkey.url();
    let mut conn = raw(&url).await;
    let store = coherent_store(&url, None).await;
    let source = Source::open();
    let long = |t: echostore::TableBuilder<u64, String>| t.ttl(Duration::from_secs(60));
    let kept: Table<u64, String> = table_on(&store, "kept", &source, long).await;

    for round in 0..50 {
        let gone = table_on(&store, &format!("gone{round}"), &source, long).await;
        assert_eq!(
            tracked_prefixes(&mut conn).await,
            4,
            "a started table is tracked"
        );
        drop(gone);
        until_async("the dropped table's prefixes are removed", async || {
            tracked_prefixes(&mut conn).await == 2
        })
        .await;
    }

    // The kept table still hears other processes' writes, and was never flushed for it.
    let flushes = kept.stats().coherence_flushes;
    kept.get(&1).await.expect("loaded");
    assert_eq!(kept.fetch(&1).await.expect("hit").origin, Origin::L1);
    let elsewhere = coherent_table(&url, "kept", &source, long).await;
    elsewhere.put(&1, "new".to_owned()).await.expect("put");
    until("the other store's put reached the kept table", || {
        kept.stats().invalidations >= 1
    })
    .await;
    assert_eq!(*kept.get(&1).await.expect("read"), "new");
    assert_eq!(
        kept.stats().coherence_flushes,
        flushes,
        "removing prefixes flushed nothing"
    );
    let _: () = conn.del("kept:{1}").await.expect("DEL");
}

/// Two tables of one name in one store: the name stays tracked until the last is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_stays_tracked_while_one_table_of_it_lives() {
    let valkey = valkey();
    let url = valkey.url();
    let mut conn = raw(&url).await;
    let store = coherent_store(&url, None).await;
    let source = Source::open();
    let first = table_on(&store, "twice", &source, |t| t).await;
    let second = table_on(&store, "twice", &source, |t| t).await;
    drop(first);
    // Another table's start is subscribed after the drop was handled: the name is still there.
    let probe = table_on(&store, "probe", &source, |t| t).await;
    assert_eq!(
        tracked_prefixes(&mut conn).await,
        4,
        "the name is still tracked beside the probe"
    );
    drop((second, probe));
    until_async("the last table of the name is dropped", async || {
        tracked_prefixes(&mut conn).await == 0
    })
    .await;
}
