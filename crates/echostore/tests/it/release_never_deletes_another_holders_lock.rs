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
