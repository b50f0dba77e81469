//! The seed's §3 race: A's lock expires mid-rebuild and B acquires it. A's token-checked release
//! leaves B's lock in place, and A's late fenced write does not land.

use crate::common;

use std::time::Duration;

use common::{
    SET_ID, SET_LOCK, SET_VALUE, Source, hold_lock, raw, set_table, settled, until, valkey,
};
use echostore::Origin;
use redis::AsyncCommands;

/// A (this store) loses its lock to expiry mid-rebuild; B (another process) takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_never_deletes_another_holders_lock() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::gated();
    let a = set_table(&valkey.url(), &source, |t| {
        t.lock_ttl(Duration::from_millis(100))
    })
    .await;
    let id = SET_ID.to_string();

    let rebuild = tokio::spawn({
        let a = a.clone();
        let id = id.clone();
        async move { a.fetch(&id).await }
    });
    until("A holds the lock and reads the source", || {
        source.calls() == 1
    })
    .await;
    // A's lease keeps its lock while A lives; a lock still expires when A's process stalls or
    // loses Valkey for longer than lock_ttl. Stand in for that expiry: the lock vanishes...
    let deleted: i64 = conn.del(SET_LOCK).await.expect("the PX fires");
    assert_eq!(deleted, 1, "A held the lock");
    // ...and B acquires the lock with its own token.
    let b_token = "token-of-B";
    hold_lock(&mut conn, SET_LOCK, b_token).await;

    source.release(); // A finishes: fenced write, then token-checked release.
    let answer = rebuild
        .await
        .expect("task")
        .expect("A still answers its waiter");
    assert_eq!(
        (answer.origin, answer.value.as_str()),
        (Origin::Loaded, "value-1-1")
    );

    let lock: Option<String> = conn.get(SET_LOCK).await.expect("GET lock");
    assert_eq!(lock.as_deref(), Some(b_token), "B's lock still exists");
    let value: Option<Vec<u8>> = conn.get(SET_VALUE).await.expect("GET value");
    assert_eq!(value, None, "A's late write did not land");
    let s = a.stats();
    assert_eq!(
        (s.fenced_write_skipped, s.release_skipped, s.released),
        (1, 1, 0)
    );
    assert_eq!(s.l1_len, 0, "a fenced-out value is not kept in L1 either");
    settled(&a).await;
}

/// A batch's lease finds one member's lock taken over by another holder: that lock is counted
/// lost once (as a single fill's lease counts it) and never asked for again, while the other
/// member's lease goes on being extended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_counts_a_lost_lock_once() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let store = common::store_on(&valkey.url()).await;
    let source = Source::gated();
    let loading = source.clone();
    let t = store
        .table::<u64, String>("leased")
        .lock_ttl(Duration::from_millis(900))
        .batch_loader(move |ids: Vec<u64>| {
            let source = loading.clone();
            async move {
                source.read_many(ids.len()).await;
                let rows = ids.into_iter().map(|id| (id, format!("row {id}")));
                Ok::<_, std::io::Error>(rows.collect::<std::collections::HashMap<_, _>>())
            }
        })
        .build()
        .await
        .expect("table");
    let batch = tokio::spawn({
        let t = t.clone();
        async move { t.get_many([1, 2]).await }
    });
    until("the batch reads the source", || source.calls() == 2).await;
    let _: () = conn
        .set("lock:leased:{1}", "token-of-another")
        .await
        .expect("SET");
    until("the lease found lock 1 not its own", || {
        t.stats().lease_lost == 1
    })
    .await;
    let extended = t.stats().lease_extended;
    until("two more rounds of the lease", || {
        t.stats().lease_extended >= extended + 2
    })
    .await;
    assert_eq!(
        t.stats().lease_lost,
        1,
        "a lost lock counted on every round"
    );
    source.release();
    let answers = batch.await.expect("task").expect("the batch answers");
    assert_eq!(answers.len(), 2, "the batch still answers both");
    let held: Option<String> = conn.get("lock:leased:{1}").await.expect("GET");
    assert_eq!(held.as_deref(), Some("token-of-another"));
    settled(&t).await;
}
