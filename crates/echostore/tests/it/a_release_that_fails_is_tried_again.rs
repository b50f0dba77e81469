//! A lock's release, or a source-budget lease's return, that fails (the connection reset, the
//! breaker open, the command refused) is tried again until it lands: left to its `PX`, the lock
//! would hold every reader of the id, and the lease a share of the fleet's budget, for a flight
//! that is over (`lock_ttl`, 5 s by default, after every blip). One server only: the refusal is
//! an ACL change, made on the node the test talks to.

use crate::common;

use std::time::Duration;

use common::{Source, builder_on, exists, raw, spawn_fetch, table_on, until, until_async, valkey};

/// `ACL SETUSER releaser <rules>` on the server.
async fn acl(conn: &mut common::RawConn, rules: &[&str]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg("releaser").arg(rules);
    let _: () = cmd.query_async(conn).await.expect("ACL SETUSER");
}

/// Valkey refuses every command of the store while its load runs, so its write back and its
/// release both fail (nothing written, the lock and the lease still there); once it takes them
/// again, the release and the lease's return land, long before the lock's 600 s `PX`. Before,
/// both stayed until it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_release_lands_once_valkey_takes_commands_again() {
    let valkey = valkey();
    if common::cluster_seeds(&valkey.url()).is_some() {
        return;
    }
    let mut admin = raw(&valkey.url()).await;
    acl(&mut admin, &["on", "nopass", "~*", "&*", "+@all"]).await;
    let url = valkey
        .url()
        .replacen("redis://", "redis://releaser:any@", 1);
    let store = builder_on(&url)
        .require_valkey(true)
        .coherence(false)
        .build()
        .await
        .expect("store");
    let source = Source::gated();
    let long_lock = |t: echostore::TableBuilder<u64, String>| {
        t.lock_ttl(Duration::from_secs(600)).source_budget(1)
    };
    let table = table_on(&store, "refused", &source, long_lock).await;

    let read = spawn_fetch(&table, 1);
    until("the load holds the lock and reads the source", || {
        source.calls() == 1
    })
    .await;
    acl(&mut admin, &["-@all"]).await;
    source.release();
    let answered = read.await.expect("task").expect("the load's answer");
    assert_eq!(*answered.value, "value-1-1");
    assert!(
        exists(&mut admin, "lock:refused:{1}").await,
        "the release was refused"
    );

    acl(&mut admin, &["+@all"]).await;
    until_async("the release landed", async || {
        !exists(&mut admin, "lock:refused:{1}").await
    })
    .await;
    until_async("the lease was given back", async || {
        let held: u64 = redis::cmd("ZCARD")
            .arg("budget:refused")
            .query_async(&mut admin)
            .await
            .expect("ZCARD");
        held == 0
    })
    .await;
}

/// The same for a batch: its write-many releases each lock with its write, and refused, it
/// released none; once Valkey takes commands again, every lock is released. Before, they stayed
/// until their `PX`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_refused_write_many_releases_its_locks_later() {
    let valkey = valkey();
    if common::cluster_seeds(&valkey.url()).is_some() {
        return;
    }
    let mut admin = raw(&valkey.url()).await;
    acl(&mut admin, &["on", "nopass", "~*", "&*", "+@all"]).await;
    let url = valkey
        .url()
        .replacen("redis://", "redis://releaser:any@", 1);
    let store = builder_on(&url)
        .require_valkey(true)
        .coherence(false)
        .build()
        .await
        .expect("store");
    let source = Source::gated();
    let rows = source.clone();
    let table = store
        .table::<u64, String>("refused-batch")
        .lock_ttl(Duration::from_secs(600))
        .batch_loader(move |ids: Vec<u64>| {
            let rows = rows.clone();
            async move {
                rows.read_many(ids.len()).await;
                let loaded = ids.into_iter().map(|id| (id, format!("row {id}")));
                Ok::<_, std::io::Error>(loaded.collect::<std::collections::HashMap<_, _>>())
            }
        })
        .build()
        .await
        .expect("table");

    let batch = common::on_task(&table, |t| async move { t.get_many([1, 2]).await });
    until("the batch holds its locks and reads the source", || {
        source.calls() == 2
    })
    .await;
    acl(&mut admin, &["-@all"]).await;
    source.release();
    let found = batch.await.expect("task").expect("the batch's answer");
    assert_eq!(found.len(), 2);
    let locks = ["lock:refused-batch:{1}", "lock:refused-batch:{2}"];
    for lock in locks {
        assert!(
            exists(&mut admin, lock).await,
            "{lock}: the write-many was refused"
        );
    }

    acl(&mut admin, &["+@all"]).await;
    for lock in locks {
        until_async("the lock was released", async || {
            !exists(&mut admin, lock).await
        })
        .await;
    }
}
