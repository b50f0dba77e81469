//! On a Valkey Cluster (three primaries on loopback): one source read per id across stores with
//! ids on every shard, coherence from every primary (by prefix, and by key, where each key is read
//! on the tracking connection of the primary that holds it), and a killed primary that degrades
//! only its own slots' keys. Needs the `cluster` feature:
//! `cargo test -p echostore --features cluster --test valkey_cluster_keeps_the_guarantees`.
#![cfg(feature = "cluster")]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{Source, answers, herd_across, settled, table_on, until, until_async, until_stats};
use echostore::{Origin, Store, Table, Tracking};
use embedded_valkey::EmbeddedCluster;

async fn cluster_store(cluster: &EmbeddedCluster) -> Store {
    tracking_store(
        cluster,
        Tracking::Broadcast,
        echostore::StoreBuilder::DEFAULT_UNCONFIRMED_L1_LIFE,
    )
    .await
}

/// A store on the cluster tracking by `mode`, keeping what Valkey has not confirmed for
/// `unconfirmed`.
async fn tracking_store(cluster: &EmbeddedCluster, mode: Tracking, unconfirmed: Duration) -> Store {
    let store = Store::builder()
        .valkey_cluster(cluster.urls())
        .require_valkey(true)
        .tracking(mode)
        .unconfirmed_l1_life(unconfirmed)
        .build()
        .await
        .expect("a store on the cluster");
    until("tracking is up on every primary", || store.is_coherent()).await;
    store
}

/// The shard (node index) that holds each id's keys in table `table`.
async fn shards(cluster: &EmbeddedCluster, table: &str, ids: &[u64]) -> BTreeMap<u64, usize> {
    let mut conn = redis::Client::open(cluster.urls()[0].as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut out = BTreeMap::new();
    for &id in ids {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(format!("{table}:{{{id}}}"))
            .query_async(&mut conn)
            .await
            .expect("KEYSLOT");
        out.insert(id, cluster.node_for_slot(slot).expect("an owner"));
    }
    out
}

/// Four stores, a herd per id, ids on every shard: one source read per id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_stores_read_each_id_once_on_every_shard() {
    let cluster = EmbeddedCluster::start(3).expect("a local cluster");
    let source = Source::open();
    let mut tables: Vec<Table<u64, String>> = Vec::new();
    for _ in 0..4 {
        tables.push(table_on(&cluster_store(&cluster).await, "cl", &source, |t| t).await);
    }
    let ids: Vec<u64> = (1..=12).collect();
    let on: BTreeSet<usize> = shards(&cluster, "cl", &ids).await.into_values().collect();
    assert_eq!(on.len(), 3, "the ids span every shard");
    for &id in &ids {
        let before = source.calls();
        for answer in answers(herd_across(&tables, 40, id)).await {
            answer.expect("a value");
        }
        assert_eq!(
            source.calls(),
            before + 1,
            "id {id}: one source read across four stores"
        );
    }
    for table in &tables {
        settled(table).await;
    }
}

/// A put through one store reaches another store's L1 for ids on every shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_reach_other_stores_from_every_primary() {
    let cluster = EmbeddedCluster::start(3).expect("a local cluster");
    let source = Source::open();
    let long = |t: echostore::TableBuilder<u64, String>| t.ttl(Duration::from_secs(60));
    let writer = table_on(&cluster_store(&cluster).await, "co", &source, long).await;
    let reader = table_on(&cluster_store(&cluster).await, "co", &source, long).await;
    let ids: Vec<u64> = (1..=9).collect();
    let on: BTreeSet<usize> = shards(&cluster, "co", &ids).await.into_values().collect();
    assert_eq!(on.len(), 3, "the ids span every shard");
    // The writer loads every id, so the reader's L1 fills from Valkey and has no write of its
    // own whose push could arrive late and be counted among the puts' pushes below.
    for &id in &ids {
        writer.get(&id).await.expect("load");
    }
    until_stats(&reader, "the loads' pushes reached the reader", |s| {
        s.invalidations >= ids.len() as u64
    })
    .await;
    for &id in &ids {
        assert_eq!(reader.fetch(&id).await.expect("read").origin, Origin::L2);
        assert_eq!(reader.fetch(&id).await.expect("hit").origin, Origin::L1);
    }
    let before = reader.stats().invalidations;
    for (n, &id) in ids.iter().enumerate() {
        writer.put(&id, format!("new-{id}")).await.expect("put");
        until_stats(&reader, "the push reached the reader", |s| {
            s.invalidations > before + n as u64
        })
        .await;
        let f = reader.fetch(&id).await.expect("re-read");
        assert_eq!(
            (f.origin, f.value.to_string()),
            (Origin::L2, format!("new-{id}"))
        );
    }
    settled(&reader).await;
}

/// Under key tracking, each value the reader takes is confirmed by the primary that holds its key
/// (with no unconfirmed life at all, only a confirmed value is an L1 hit), and from then on that
/// primary pushes the writer's puts to the reader, whose copies had a minute left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_key_tracking_puts_reach_other_stores_from_every_primary() {
    let cluster = EmbeddedCluster::start(3).expect("a local cluster");
    let source = Source::open();
    let long = |t: echostore::TableBuilder<u64, String>| t.ttl(Duration::from_secs(60));
    let keyed = || tracking_store(&cluster, Tracking::Keys, Duration::ZERO);
    let writer = table_on(&keyed().await, "ck", &source, long).await;
    let reader = table_on(&keyed().await, "ck", &source, long).await;
    let ids: Vec<u64> = (1..=9).collect();
    let on: BTreeSet<usize> = shards(&cluster, "ck", &ids).await.into_values().collect();
    assert_eq!(on.len(), 3, "the ids span every shard");
    for &id in &ids {
        writer.put(&id, format!("old-{id}")).await.expect("put");
        until_async("the reader's copy is confirmed", async || {
            let f = reader.fetch(&id).await.expect("read");
            assert_eq!(*f.value, format!("old-{id}"));
            f.origin == Origin::L1
        })
        .await;
    }
    for &id in &ids {
        let before = reader.stats().invalidations;
        writer.put(&id, format!("new-{id}")).await.expect("put");
        until_async("the put reached the reader", async || {
            *reader.fetch(&id).await.expect("read").value == format!("new-{id}")
        })
        .await;
        assert!(reader.stats().invalidations > before, "id {id}: by a push");
    }
    assert_eq!(source.calls(), 0, "every value came from a put");
    settled(&reader).await;
}

/// Killing one primary degrades only the ids of its slots: the others keep one source read per
/// id across stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_primary_degrades_only_its_slots() {
    let mut cluster = EmbeddedCluster::start(3).expect("a local cluster");
    let source = Source::open();
    let mut tables: Vec<Table<u64, String>> = Vec::new();
    for _ in 0..3 {
        let store = cluster_store(&cluster).await;
        tables.push(table_on(&store, "dp", &source, |t| t).await);
    }
    let ids: Vec<u64> = (1..=30).collect();
    let owners = shards(&cluster, "dp", &ids).await;
    // Without replicas, a cluster that requires full coverage refuses every command once a
    // primary is gone; with it off, the other shards go on serving their slots.
    for url in cluster.urls() {
        let mut node = redis::Client::open(url.as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .query_async(&mut node)
            .await
            .expect("CONFIG SET");
    }
    cluster.stop_node(0).expect("kill primary 0");
    let alive: Vec<u64> = owners
        .iter()
        .filter(|(_, n)| **n != 0)
        .map(|(id, _)| *id)
        .collect();
    let dead: Vec<u64> = owners
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(id, _)| *id)
        .collect();
    assert!(!alive.is_empty() && !dead.is_empty());
    for &id in &dead {
        // Served all the same, in-process (its slot's breaker opens).
        for answer in answers(herd_across(&tables, 10, id)).await {
            answer.expect("a value from the loader");
        }
    }
    for &id in &alive {
        let before = source.calls();
        for answer in answers(herd_across(&tables, 30, id)).await {
            answer.expect("a value");
        }
        assert_eq!(
            source.calls(),
            before + 1,
            "id {id} on a live shard: one source read"
        );
    }
    for table in &tables {
        settled(table).await;
    }
}
