//! On a Valkey Cluster, a slot being migrated answers a script over an id's two keys with
//! `TRYAGAIN` while one of them has moved and the other has not. That is a pause of the slot, not
//! a dead server: the call is retried within its timeout, lands once the migration is done, and
//! the slot's breaker stays closed. Needs the `cluster` feature:
//! `cargo test -p echostore --features cluster --test a_slot_migration_delays_no_write`.
#![cfg(feature = "cluster")]

mod common;

use std::time::Duration;

use common::{Source, read_envelope, table_on, until, until_async};
use echostore::Store;
use embedded_valkey::EmbeddedCluster;
use redis::aio::MultiplexedConnection;

async fn node(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

async fn cluster_cmd<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    args: &[&str],
) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// How many commands the node at `url` refused with `TRYAGAIN` (`INFO errorstats`).
async fn tryagains(url: &str) -> u64 {
    let info: String = cluster_cmd(&mut node(url).await, &["INFO", "errorstats"]).await;
    info.lines()
        .find_map(|line| line.strip_prefix("errorstat_TRYAGAIN:count="))
        .map_or(0, |n| n.trim().parse().expect("a count"))
}

/// A put made while its id's slot is half migrated (the value moved, the lock key not) meets
/// `TRYAGAIN`, and lands on the new owner once the migration completes: `Ok`, the put's value on
/// Valkey, and no breaker opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_during_a_slot_migration_lands_once_it_completes() {
    let cluster = EmbeddedCluster::start(3).expect("a local cluster");
    let source = Source::open();
    let store = Store::builder()
        .valkey_cluster(cluster.urls())
        .require_valkey(true)
        .build()
        .await
        .expect("a store on the cluster");
    until("tracking is up on every primary", || store.is_coherent()).await;
    let table = table_on(&store, "mig", &source, |t| t.ttl(Duration::from_secs(60))).await;
    table.get(&1).await.expect("a first load");

    let urls = cluster.urls();
    let mut any = node(&urls[0]).await;
    let slot: u16 = cluster_cmd(&mut any, &["CLUSTER", "KEYSLOT", "mig:{1}"]).await;
    let from = cluster.node_for_slot(slot).expect("an owner");
    let to = (from + 1) % urls.len();
    let (mut src, mut dst) = (node(&urls[from]).await, node(&urls[to]).await);
    let src_id: String = cluster_cmd(&mut src, &["CLUSTER", "MYID"]).await;
    let dst_id: String = cluster_cmd(&mut dst, &["CLUSTER", "MYID"]).await;
    let slot = slot.to_string();
    let _: () = cluster_cmd(
        &mut dst,
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id],
    )
    .await;
    let _: () = cluster_cmd(
        &mut src,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id],
    )
    .await;
    // The value moves first; the lock key (absent) stays behind: a script over both is refused
    // with TRYAGAIN on both nodes until the slot is handed over.
    let dst_port = cluster.ports()[to].to_string();
    let _: String = cluster_cmd(
        &mut src,
        &["MIGRATE", "127.0.0.1", &dst_port, "mig:{1}", "0", "5000"],
    )
    .await;
    let tried_before = tryagains(&urls[from]).await + tryagains(&urls[to]).await;

    let writer = table.clone();
    let put = tokio::spawn(async move { writer.put(&1, "during the migration".into()).await });
    until_async("the put met TRYAGAIN", async || {
        tryagains(&urls[from]).await + tryagains(&urls[to]).await > tried_before
    })
    .await;
    for conn in [&mut dst, &mut src] {
        let _: () = cluster_cmd(conn, &["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]).await;
    }
    let mut third = node(&urls[3 - from - to]).await;
    let _: () = cluster_cmd(&mut third, &["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]).await;

    let put = put.await.expect("the put's task").expect("the put landed");
    assert_eq!(put.as_str(), "during the migration");
    assert!(!store.is_degraded(), "no breaker opened");
    let mut on_dst = common::raw(&format!("cluster:{}", urls.join(","))).await;
    let stored = read_envelope::<String>(&mut on_dst, "mig:{1}")
        .await
        .expect("the value on its new owner");
    assert_eq!(stored.value, "during the migration");
}
