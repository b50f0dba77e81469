//! On a Valkey Cluster, a slot being migrated answers a script over an id's two keys with
//! `TRYAGAIN` while one of them has moved and the other has not. That is a pause of the slot, not
//! a dead server: the call is retried within its timeout, lands once the migration is done, and
//! the slot's breaker stays closed. Reads of the moved value go on meanwhile (`ASK`), which makes
//! a half-migrated slot the one place a write is held on the wire while reads of its id are not:
//! the restarted owner's test below needs that. Needs the `cluster` feature:
//! `cargo test -p echostore --features cluster --test a_slot_migration_delays_no_write`.
#![cfg(feature = "cluster")]

use crate::common;

use std::time::Duration;

use common::{
    POISON, Source, Touchy, read_envelope, settled, table_on, touchy, until, until_async,
};
use echostore::{Error, Store};
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

/// A slot half migrated: its value key moved to `to`, the rest (an absent lock key) not yet.
struct Migration {
    urls: Vec<String>,
    slot: String,
    from: usize,
    to: usize,
    dst_id: String,
}

impl Migration {
    /// Starts moving `key`'s slot to another primary and moves `key` (present) there: a script
    /// over `key` and an absent key of its slot meets `TRYAGAIN` on both nodes from now on.
    async fn start(cluster: &EmbeddedCluster, key: &str) -> Migration {
        let urls = cluster.urls();
        let mut any = node(&urls[0]).await;
        let slot: u16 = cluster_cmd(&mut any, &["CLUSTER", "KEYSLOT", key]).await;
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
        let dst_port = cluster.ports()[to].to_string();
        let _: String = cluster_cmd(
            &mut src,
            &["MIGRATE", "127.0.0.1", &dst_port, key, "0", "5000"],
        )
        .await;
        Migration {
            urls,
            slot,
            from,
            to,
            dst_id,
        }
    }

    /// `TRYAGAIN` refusals so far on the two nodes.
    async fn refusals(&self) -> u64 {
        tryagains(&self.urls[self.from]).await + tryagains(&self.urls[self.to]).await
    }

    /// Hands the slot over to its new owner, on every primary.
    async fn complete(self) {
        let third = 3 - self.from - self.to;
        for at in [self.to, self.from, third] {
            let mut conn = node(&self.urls[at]).await;
            let _: () = cluster_cmd(
                &mut conn,
                &["CLUSTER", "SETSLOT", &self.slot, "NODE", &self.dst_id],
            )
            .await;
        }
    }
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

    let migration = Migration::start(&cluster, "mig:{1}").await;
    let tried_before = migration.refusals().await;
    let writer = table.clone();
    let put = tokio::spawn(async move { writer.put(&1, "during the migration".into()).await });
    until_async("the put met TRYAGAIN", async || {
        migration.refusals().await > tried_before
    })
    .await;
    migration.complete().await;

    let put = put.await.expect("the put's task").expect("the put landed");
    assert_eq!(put.as_str(), "during the migration");
    assert!(!store.is_degraded(), "no breaker opened");
    let mut on_dst = common::raw(&format!("cluster:{}", cluster.urls().join(","))).await;
    let stored = read_envelope::<String>(&mut on_dst, "mig:{1}")
        .await
        .expect("the value on its new owner");
    assert_eq!(stored.value, "during the migration");
}

/// The dead owner's write still on the wire outlives it: the restarted owner lets no read of the
/// id settle, and starts no flight of it, until that write has landed (issue #18: a restarted
/// owner forgot the write; a caller read the old value and kept it, and L1 held it after Valkey
/// took the new one). The put is held by the migration (`TRYAGAIN`) while reads of the id go on.
/// Coherence is off, so no push repairs L1 afterwards: what a read keeps stays for the ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_owner_waits_for_the_dead_ones_writes() {
    let cluster = EmbeddedCluster::start(3).expect("a local cluster");
    let source = Source::open();
    let store = Store::builder()
        .valkey_cluster(cluster.urls())
        .require_valkey(true)
        .coherence(false)
        .valkey_timeout(Duration::from_secs(30))
        .build()
        .await
        .expect("a store on the cluster");
    let t = touchy(&store, &source).await;
    let id = Touchy(POISON, 0);
    t.put(&id, "v0".into()).await.expect("put v0");

    let migration = Migration::start(&cluster, "touchy:{666}").await;
    let tried_before = migration.refusals().await;
    let v1 = tokio::spawn({
        let (t, id) = (t.clone(), id.clone());
        async move { t.put(&id, "v1".into()).await }
    });
    until_async("put v1 met TRYAGAIN", async || {
        migration.refusals().await > tried_before
    })
    .await;
    // A miss on a poisoned copy of the id being written crashes the owner. v1's write runs on a
    // task of its own, which holds its caller's reply: it answers when the write lands.
    let crashed = t.get(&Touchy(POISON, 1)).await;
    assert!(matches!(crashed, Err(Error::Stopped)), "{crashed:?}");
    until("the supervisor restarted the owner", || {
        t.stats().owner_restarts == 1
    })
    .await;

    // A read of the id while v1 is held: it waits for v1 (a queued flight), or, as before the
    // fix, reads v0 (the value moved: `ASK`) and keeps it.
    common::settled(&t).await; // the count below is of the next flight only
    let l2_hits = t.stats().l2_hits;
    let read = tokio::spawn({
        let (t, id) = (t.clone(), id.clone());
        async move { t.fetch(&id).await }
    });
    common::until_stats(&t, "the read waits or has read", |s| {
        s.in_flight == 1 || s.l2_hits > l2_hits
    })
    .await;
    migration.complete().await;

    v1.await.expect("task").expect("v1 landed");
    let read = read.await.expect("task").expect("a value");
    assert_eq!(read.value.as_str(), "v1", "the read waited for the write");
    let again = t.fetch(&id).await.expect("a value");
    assert_eq!(again.value.as_str(), "v1", "L1 holds what Valkey holds");
    settled(&t).await;
    assert_eq!(source.calls(), 0, "the source was never read");
}
