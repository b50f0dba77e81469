//! A lock's release, or a source-budget lease's return, that fails (the connection reset, the
//! breaker open, the command refused) is tried again until it lands: left to its `PX`, the lock
//! would hold every reader of the id, and the lease a share of the fleet's budget, for a flight
//! that is over (`lock_ttl`, 5 s by default, after every blip). And a reloader's "gone" whose
//! delete was refused is made good once Valkey takes commands again. One server only: the
//! refusal is an ACL change, made on the node the test talks to.

use crate::common;

use std::time::Duration;

use common::{Source, builder_on, exists, raw, spawn_fetch, table_on, until, until_async, valkey};

/// A store that reaches the server as user `releaser`, which `ACL SETUSER` can then refuse
/// everything; and an admin connection to do it with. `None` on a cluster.
async fn refusable_store(valkey: &common::Valkey) -> Option<(common::RawConn, echostore::Store)> {
    if common::cluster_seeds(&valkey.url()).is_some() {
        return None;
    }
    let mut admin = raw(&valkey.url()).await;
    common::acl_setuser(
        &mut admin,
        "releaser",
        &["on", "nopass", "~*", "&*", "+@all"],
    )
    .await;
    let url = valkey
        .url()
        .replacen("redis://", "redis://releaser:any@", 1);
    let store = builder_on(&url)
        .require_valkey(true)
        .coherence(false)
        .build()
        .await
        .expect("store");
    Some((admin, store))
}

/// `key` is still on the server, `what` the store sent to remove it refused; once the server
/// takes the store's commands again, the store's retry (or repair) removes it.
async fn gone_once_allowed(admin: &mut common::RawConn, key: &str, what: &str) {
    assert!(exists(admin, key).await, "{what} was refused");
    common::acl_setuser(admin, "releaser", &["+@all"]).await;
    until_async(&format!("{what} landed"), async || {
        !exists(admin, key).await
    })
    .await;
}

/// How many native token-checked releases (`DELIFEQ`, which the store uses where the server has
/// it, as the embedded one does) the server ran since the last `CONFIG RESETSTAT`.
async fn releases(admin: &mut common::RawConn) -> u64 {
    common::command_calls(admin, "delifeq").await
}

/// Valkey refuses every command of the store while its load runs, so its write back and its
/// release both fail (nothing written, the lock and the lease still there); once it takes them
/// again, the release and the lease's return land, long before the lock's 600 s `PX`. Before,
/// both stayed until it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_release_lands_once_valkey_takes_commands_again() {
    let valkey = valkey();
    let Some((mut admin, store)) = refusable_store(&valkey).await else {
        return;
    };
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
    common::acl_setuser(&mut admin, "releaser", &["-@all"]).await;
    source.release();
    let answered = read.await.expect("task").expect("the load's answer");
    assert_eq!(*answered.value, "value-1-1");
    gone_once_allowed(&mut admin, "lock:refused:{1}", "the release").await;
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
/// released none; once Valkey takes commands again, each lock still its own is released, and
/// one another holder took meanwhile is left to it (the retry is token-checked). Before, the
/// batch's locks stayed until their `PX`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_refused_write_many_releases_its_locks_later() {
    let valkey = valkey();
    let Some((mut admin, store)) = refusable_store(&valkey).await else {
        return;
    };
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
    common::acl_setuser(&mut admin, "releaser", &["-@all"]).await;
    source.release();
    let found = batch.await.expect("task").expect("the batch's answer");
    assert_eq!((found[&1].as_str(), found[&2].as_str()), ("row 1", "row 2"));
    let (ours, taken) = ("lock:refused-batch:{1}", "lock:refused-batch:{2}");
    for lock in [ours, taken] {
        assert!(
            exists(&mut admin, lock).await,
            "{lock}: the write-many was refused"
        );
    }
    // Another holder takes the second lock (as after its PX): no retry of this batch may drop it.
    let _: () = redis::cmd("SET")
        .arg(taken)
        .arg("another-holder")
        .arg("XX")
        .arg("KEEPTTL")
        .query_async(&mut admin)
        .await
        .expect("SET");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await
        .expect("CONFIG RESETSTAT");

    common::acl_setuser(&mut admin, "releaser", &["+@all"]).await;
    until_async("the lock still its own was released", async || {
        !exists(&mut admin, ours).await
    })
    .await;
    until_async("both locks' releases ran", async || {
        releases(&mut admin).await >= 2
    })
    .await;
    let holder: Option<String> = redis::cmd("GET")
        .arg(taken)
        .query_async(&mut admin)
        .await
        .expect("GET");
    assert_eq!(
        holder.as_deref(),
        Some("another-holder"),
        "left to its holder"
    );
}

/// A reloader's "gone" whose delete Valkey refused: the copy the source called gone is still on
/// Valkey, in its stale window, so the id is left unsettled, and the copy is deleted once Valkey
/// takes commands again. Before, nothing deleted it until its stale window ended, and a read
/// that serves stale copies could be answered from it after the source said it was gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_whose_delete_was_refused_is_deleted_later() {
    let valkey = valkey();
    let Some((mut admin, store)) = refusable_store(&valkey).await else {
        return;
    };
    let (source, gate) = (Source::open(), Source::gated());
    let reloads = gate.clone();
    let table = table_on(&store, "refused-gone", &source, |t| {
        t.ttl(Duration::from_millis(200))
            .stale_for(Duration::from_secs(600))
            .reloader(move |_id: u64, _old: std::sync::Arc<String>| {
                let gate = reloads.clone();
                async move {
                    gate.read().await;
                    Ok::<_, std::io::Error>(echostore::Reload::Gone)
                }
            })
    })
    .await;
    table.get(&1).await.expect("the cold load");
    until_async("the copy's freshness ended", async || {
        table.peek(&1).await.expect("peek").is_none()
    })
    .await;

    let read = spawn_fetch(&table, 1);
    until("the reloader runs", || gate.calls() == 1).await;
    common::acl_setuser(&mut admin, "releaser", &["-@all"]).await;
    gate.release();
    let answered = read.await.expect("task");
    assert!(
        matches!(answered, Err(echostore::Error::Absent)),
        "gone at the source: {answered:?}"
    );
    gone_once_allowed(&mut admin, "refused-gone:{1}", "the delete").await;
}
