//! The seed's §3 race: A's lock expires mid-rebuild and B acquires it. A's token-checked release
//! leaves B's lock in place, and A's late fenced write does not land.

mod common;

use std::time::Duration;

use common::{Source, raw, store_on, until, valkey};
use echostore::Origin;
use redis::AsyncCommands;

/// A (this store) loses its lock to expiry mid-rebuild; B (another process) takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_never_deletes_another_holders_lock() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::gated();
    let a = store_on(&valkey.url())
        .await
        .table::<String, String>("set")
        .lock_ttl(Duration::from_millis(100))
        .loader({
            let loader = source.loader();
            move |_id: String| loader(1)
        })
        .start()
        .await
        .expect("table");
    let id = "EMS0ODMggk1d5N".to_string();
    let lock_key = "lock:set:{EMS0ODMggk1d5N}";

    let rebuild = tokio::spawn({
        let a = a.clone();
        let id = id.clone();
        async move { a.fetch(&id).await }
    });
    until("A holds the lock and reads the source", || {
        source.calls() == 1
    })
    .await;
    // A's rebuild runs long: its PX expires...
    let mut probe = conn.clone();
    let mut gone = false;
    while !gone {
        gone = !probe.exists::<_, bool>(lock_key).await.expect("EXISTS");
        tokio::task::yield_now().await;
    }
    // ...and B acquires the lock with its own token.
    let b_token = "token-of-B";
    let b: Option<String> = redis::cmd("SET")
        .arg(lock_key)
        .arg(b_token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(&mut conn)
        .await
        .expect("B's SET NX PX");
    assert_eq!(b.as_deref(), Some("OK"));

    source.release(); // A finishes: fenced write, then token-checked release.
    let answer = rebuild
        .await
        .expect("task")
        .expect("A still answers its waiter");
    assert_eq!(
        (answer.origin, answer.value.as_str()),
        (Origin::Loaded, "value-1-1")
    );

    let lock: Option<String> = conn.get(lock_key).await.expect("GET lock");
    assert_eq!(lock.as_deref(), Some(b_token), "B's lock still exists");
    let value: Option<Vec<u8>> = conn.get("set:{EMS0ODMggk1d5N}").await.expect("GET value");
    assert_eq!(value, None, "A's late write did not land");
    let s = a.stats();
    assert_eq!(
        (s.fenced_write_skipped, s.release_skipped, s.released),
        (1, 1, 0)
    );
    assert_eq!(s.l1_len, 0, "a fenced-out value is not kept in L1 either");
}
