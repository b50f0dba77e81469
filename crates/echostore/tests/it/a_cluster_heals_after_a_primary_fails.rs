//! A Valkey Cluster primary that dies under load and comes back (restarted, or replaced by its
//! replica) degrades only its own slots while it is away, and every store is back to normal soon
//! after its slots are served again: no read waits a timeout, every slot answers, and a write made
//! after the heal reaches every store. The load is a service's: three stores, single and batch
//! reads (a quarter of them `get_many` of 20 ids), a put every 100 ms.
#![cfg(feature = "cluster")]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use common::{until, until_async};
use echostore::{Store, Table};
use embedded_valkey::EmbeddedCluster;

/// Ids the load reads: many more than L1 keeps a second, so that reads reach Valkey.
const IDS: u64 = 20_000;
/// Tasks reading per store.
const READERS: u64 = 16;

/// A table of a store of its own on the cluster: a short life, so that reads go on reaching
/// Valkey, and a batch loader for `get_many`.
async fn table(seeds: &[String]) -> Table<u64, String> {
    let store = Store::builder()
        .valkey_cluster(seeds.to_vec())
        .require_valkey(true)
        .build()
        .await
        .expect("a store on the cluster");
    store
        .table::<u64, String>("heal")
        .ttl(Duration::from_millis(1_500))
        .batch_loader(|ids: Vec<u64>| async move {
            Ok::<_, std::io::Error>(
                ids.into_iter()
                    .map(|id| (id, format!("row {id}")))
                    .collect(),
            )
        })
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(format!("row {id}")) })
        .build()
        .await
        .expect("table")
}

/// The load on `tables`: readers, a quarter of their reads batches, and a writer per table;
/// runs until `stop`.
fn load(tables: &[Table<u64, String>], stop: &Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for (t, table) in tables.iter().enumerate() {
        for r in 0..READERS {
            let (table, stop) = (table.clone(), Arc::clone(stop));
            tasks.push(tokio::spawn(async move {
                let mut id = (t as u64 * READERS + r) * 7_919 % IDS;
                let mut n = 0u64;
                while !stop.load(Relaxed) {
                    id = (id * 48_271 + 11) % IDS;
                    n += 1;
                    if n.is_multiple_of(4) {
                        let ids: Vec<u64> = (0..20).map(|i| (id + i * 997) % IDS).collect();
                        let _ = table.get_many(&ids).await;
                    } else {
                        let _ = table.get(&id).await;
                    }
                }
            }));
        }
        let (table, stop) = (table.clone(), Arc::clone(stop));
        tasks.push(tokio::spawn(async move {
            let mut id = t as u64;
            while !stop.load(Relaxed) {
                id = (id + 101) % IDS;
                let _ = table.put(&id, format!("put {id}")).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    tasks
}

/// Every store reads fresh ids in every slot range without one Valkey error meanwhile.
async fn back_to_normal(tables: &[Table<u64, String>], round: &AtomicU64) -> bool {
    let base = IDS + round.fetch_add(1, Relaxed) * 64;
    for table in tables {
        let before = table.stats().l2_errors;
        for id in base..base + 64 {
            if table.fetch(&id).await.is_err() {
                return false;
            }
        }
        if table.stats().l2_errors != before {
            return false;
        }
    }
    true
}

/// After the heal, a put in one store is read by the others (no store keeps an older copy).
async fn writes_reach_every_store(tables: &[Table<u64, String>]) {
    let id = IDS * 2;
    for table in tables {
        table.get(&id).await.expect("read");
    }
    tables[0]
        .put(&id, "after the heal".into())
        .await
        .expect("put");
    for table in &tables[1..] {
        until_async("the put after the heal reached every store", async || {
            table.get(&id).await.is_ok_and(|v| *v == "after the heal")
        })
        .await;
    }
}

/// Starts the stores and the load on `cluster`, runs `fault`, then waits until every store is
/// back to normal and a write reaches them all.
async fn heals_after(cluster: &mut EmbeddedCluster, fault: impl FnOnce(&mut EmbeddedCluster)) {
    let _turn = common::heavy().await;
    let seeds = cluster.urls();
    let mut tables = Vec::new();
    for _ in 0..3 {
        tables.push(table(&seeds).await);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(&tables, &stop);
    until("the load reads", || {
        tables
            .iter()
            .all(|t| t.stats().l2_hits + t.stats().source_reads > 1_000)
    })
    .await;
    tokio::task::block_in_place(|| fault(cluster));
    let round = AtomicU64::new(0);
    until_async("every store is back to normal", async || {
        back_to_normal(&tables, &round).await
    })
    .await;
    writes_reach_every_store(&tables).await;
    stop.store(true, Relaxed);
    for task in tasks {
        task.await.expect("a load task");
    }
}

/// A primary SIGKILLed under load for 5 s, then restarted empty (no replicas, full coverage not
/// required): every store serves every slot again once the cluster is ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_primary_heals_every_store() {
    let mut cluster = EmbeddedCluster::builder()
        .full_coverage(false)
        .start()
        .expect("a local cluster");
    heals_after(&mut cluster, |cluster| {
        cluster.stop_node(1).expect("kill a primary");
        std::thread::sleep(Duration::from_secs(5)); // the outage itself, not a wait
        cluster.restart_node(1).expect("restart it");
    })
    .await;
}

/// A replica promoted under load (`CLUSTER FAILOVER`): every store follows the slots to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_replica_heals_every_store() {
    let mut cluster = EmbeddedCluster::builder()
        .replicas(1)
        .start()
        .expect("a local cluster with replicas");
    heals_after(&mut cluster, |cluster| {
        cluster.failover(1).expect("a replica takes over shard 1");
    })
    .await;
}

/// A primary SIGKILLed under load is replaced by its replica (the cluster's own failover), and
/// comes back as a replica: every store serves every slot again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_replaced_by_its_replica_heals_every_store() {
    let mut cluster = EmbeddedCluster::builder()
        .replicas(1)
        .node_timeout(Duration::from_secs(1))
        .start()
        .expect("a local cluster with replicas");
    heals_after(&mut cluster, |cluster| {
        let killed = cluster.kill_primary(1).expect("kill shard 1's primary");
        cluster
            .wait_for_new_primary(1, Duration::from_secs(30))
            .expect("its replica takes over");
        cluster
            .restart_node(killed)
            .expect("the old primary rejoins");
    })
    .await;
}
