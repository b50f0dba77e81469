//! A process that leaves (a deploy, a scale-down) calls `Store::shutdown` once it has stopped
//! making calls: the store waits for what it has under way on Valkey, so the locks its fills
//! hold are handed back and no other process's reader waits out their `lock_ttl`.

use crate::common;

use std::time::Duration;

use common::{Source, exists, raw, store_on, table_on, until, valkey};
use echostore::{Error, ReadOptions};

const LOCK: &str = "lock:leaving:{7}";
const VALUE: &str = "leaving:{7}";

/// A fill whose only caller stopped waiting goes on holding the id's lock; `shutdown` returns
/// once it has landed: its value is on Valkey and its lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_a_fill_its_callers_left() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::gated();
    let store = store_on(&valkey.url()).await;
    let lasting = |t: echostore::TableBuilder<u64, String>| t.lock_ttl(Duration::from_secs(60));
    let table = table_on(&store, "leaving", &source, lasting).await;
    let brief = ReadOptions::new().wait_at_most(Duration::from_millis(20));
    let read = table.get_with(&7, brief).await;
    assert!(matches!(read, Err(Error::WaitTimeout { .. })), "{read:?}");
    until("the fill is loading", || source.calls() == 1).await;
    assert!(exists(&mut conn, LOCK).await, "the fill holds the lock");

    let leaving = store.clone();
    let shutdown = tokio::spawn(async move { leaving.shutdown(Duration::from_secs(30)).await });
    source.release();
    shutdown
        .await
        .expect("the task")
        .expect("shut down in time");
    assert!(!exists(&mut conn, LOCK).await, "the lock was handed back");
    assert!(exists(&mut conn, VALUE).await, "the fill's value landed");
}

/// Work still under way when the bound runs out: `WaitTimeout`, and the work goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_says_when_work_is_still_under_way() {
    let valkey = valkey();
    let source = Source::gated(); // never released
    let store = store_on(&valkey.url()).await;
    let table = table_on(&store, "stuck", &source, |t| t).await;
    let brief = ReadOptions::new().wait_at_most(Duration::from_millis(20));
    assert!(table.get_with(&7, brief).await.is_err());
    until("the fill is loading", || source.calls() == 1).await;
    let bound = Duration::from_millis(50);
    let err = store
        .shutdown(bound)
        .await
        .expect_err("a fill is under way");
    assert!(
        matches!(err, Error::WaitTimeout { waited } if waited == bound),
        "{err}"
    );
}

/// A store without a Valkey has nothing to hand back.
#[tokio::test]
async fn shutdown_without_valkey_returns_at_once() {
    let store = echostore::Store::builder().build().await.expect("store");
    store
        .shutdown(Duration::ZERO)
        .await
        .expect("nothing under way");
}
