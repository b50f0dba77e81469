//! Writes are ordered by Valkey, not by the writers' clocks: the write scripts stamp `written_at`
//! with the server's `TIME`, so the write that lands last wins, whatever its writer's clock said,
//! and every store converges on it. A stored `written_at` ahead of the server's clock (planted
//! bytes) stands against a write: a put then answers `Error::Superseded` (it said `Ok` as if
//! stored), counts `writes_superseded` and leaves no L1 copy; one more than `MAX_CLOCK_SKEW_MS` ahead is garbage, and replaced.

use crate::common;

use std::time::Duration;

use common::{
    Proxy, Source, envelope, exists, patient_store, raw, read_envelope, settled, unix_ms, until,
    until_async, valkey, valkey_table,
};
use echostore::protocol::MAX_CLOCK_SKEW_MS;
use echostore::protocol::scripts::{FENCED_WRITE_SCRIPT, PUT_SCRIPT};
use echostore::{Origin, Store, Table};
use redis::AsyncCommands;

const VALUE: &str = "nw:{1}";
const LOCK: &str = "lock:nw:{1}";
const HOUR_MS: u64 = 3_600_000;

async fn table_on(store: &Store, source: &Source) -> Table<u64, String> {
    common::table_on(store, "nw", source, |t| t.ttl(Duration::from_secs(60))).await
}

/// The fenced write script, as a fill holding `my-token` runs it: `envelope` for a minute.
async fn fenced_write(conn: &mut common::RawConn, envelope: &[u8]) -> i64 {
    redis::Script::new(FENCED_WRITE_SCRIPT)
        .key(VALUE)
        .key(LOCK)
        .arg("my-token")
        .arg(envelope)
        .arg(60_000)
        .invoke_async(conn)
        .await
        .expect("fenced write")
}

/// The put script: `envelope` for a minute, refused after `deadline_ms` on the server's clock
/// (0: no deadline); what it wrote, and the server's time.
async fn put_script(conn: &mut common::RawConn, envelope: &[u8], deadline_ms: u64) -> (i64, u64) {
    redis::Script::new(PUT_SCRIPT)
        .key(VALUE)
        .key(LOCK)
        .arg(envelope)
        .arg(60_000)
        .arg(deadline_ms)
        .invoke_async(conn)
        .await
        .expect("put")
}

/// Valkey's clock: `TIME` as (seconds, microseconds).
async fn server_time(conn: &mut common::RawConn) -> (u64, u64) {
    redis::cmd("TIME").query_async(conn).await.expect("TIME")
}

/// Store A's put of `"first-stamped"` takes its client-side stamp, then is held on its way to
/// Valkey (a slow network); store B's put of `"second-stamped"`, stamped later on B's clock,
/// lands first. A's put lands last, so it wins: Valkey holds it with a `written_at` from the
/// server's clock, neither store counts a superseded write, and both stores read it (B's L1
/// copy was retired by A's push). With writes ordered by the writers' clocks, A's put was a
/// silent no-op that answered `Ok` (found by `echostore check`: a put racing a fill that read the
/// source before it left the fill's older value standing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_that_lands_last_wins_whatever_its_writers_clock_said() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let proxy = Proxy::start(&valkey.url()).await;
    let source = Source::open();
    // The hold is a delay here, not an outage.
    let a_store = patient_store(&proxy.url(), Duration::from_secs(30)).await;
    let a = table_on(&a_store, &source).await;
    let b = valkey_table(&valkey.url(), "nw", &source, |t| {
        t.ttl(Duration::from_secs(60))
    })
    .await;
    a.put(&1, "first".into()).await.expect("A's first put"); // loads the script through the proxy

    proxy.hold();
    let mut held = std::pin::pin!(a.put(&1, "first-stamped".into()));
    assert!(futures::poll!(held.as_mut()).is_pending(), "held");
    let stamped_by = unix_ms(); // A's put took its client-side stamp when first polled
    until("B's clock is past A's stamp", || unix_ms() > stamped_by).await;
    b.put(&1, "second-stamped".into())
        .await
        .expect("B's put lands first");
    proxy.release();
    held.await.expect("A's put lands");

    let stored = read_envelope::<String>(&mut conn, VALUE)
        .await
        .expect("stored");
    assert_eq!(stored.value, "first-stamped", "the last write to land wins");
    assert!(
        stored.written_at_ms > stamped_by,
        "stamped by Valkey as it landed, not by A's clock at the call"
    );
    assert_eq!(a.stats().writes_superseded + b.stats().writes_superseded, 0);
    let seen = a.fetch(&1).await.expect("a value");
    assert_eq!(seen.value.as_str(), "first-stamped");
    until("B's L1 copy of its own put was retired by A's push", || {
        b.stats().l1_len == 0
    })
    .await;
    let seen = b.fetch(&1).await.expect("a value");
    assert_eq!(
        (seen.origin, seen.value.as_str()),
        (Origin::L2, "first-stamped")
    );
    assert_eq!(source.calls(), 0);
    settled(&a).await;
}

/// A value stamped slightly ahead (within the skew allowance) stands against a put; one stamped
/// more than `MAX_CLOCK_SKEW_MS` ahead is garbage and the put replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_respects_newer_values_and_replaces_garbage_from_the_future() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let t = valkey_table(&valkey.url(), "nw", &source, |t| {
        t.ttl(Duration::from_secs(60))
    })
    .await;
    let now = unix_ms();

    let newer = envelope(now + HOUR_MS, now + 60_000, &"stamped a minute ahead");
    let _: () = conn.set(VALUE, &newer).await.expect("plant");
    let superseded = t.put(&1, "mine".into()).await;
    assert!(
        matches!(superseded, Err(ref e) if e.is_superseded()),
        "the put says it changed nothing: {superseded:?}"
    );
    let stored: Vec<u8> = conn.get(VALUE).await.expect("GET");
    assert_eq!(stored, newer, "the newer value stands");
    until("the put landed in the owner", || {
        t.stats().writes_superseded == 1
    })
    .await;
    assert_eq!(t.stats().l1_len, 0);

    let garbage = envelope(
        now + HOUR_MS,
        now + MAX_CLOCK_SKEW_MS + HOUR_MS,
        &"stamped an hour ahead",
    );
    let _: () = conn.set(VALUE, &garbage).await.expect("plant");
    t.put(&1, "mine".into()).await.expect("put");
    let stored = read_envelope::<String>(&mut conn, VALUE)
        .await
        .expect("stored");
    assert_eq!(stored.value, "mine", "garbage from the future is replaced");
    assert_eq!(t.stats().writes_superseded, 1);
    assert_eq!(source.calls(), 0);
    settled(&t).await;
}

/// The scripts themselves, as docs/lock-protocol.md quotes them: the fenced write returns -1,
/// writes nothing and releases its lock when the stored envelope is stamped ahead of the server's
/// clock, even while the lock is its own; both scripts replace a stored `written_at` more than
/// `MAX_CLOCK_SKEW_MS` ahead, stamping what they store with the server's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_versioned_scripts_compare_written_at() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let now = unix_ms();
    let mine = envelope(now + HOUR_MS, now, &"mine");
    let stored_at = |written_at: u64| envelope(now + HOUR_MS, written_at, &"stored");

    let _: () = conn.set(LOCK, "my-token").await.expect("SET lock");
    let _: () = conn
        .set(VALUE, stored_at(now + 60_000))
        .await
        .expect("plant");
    let written = fenced_write(&mut conn, &mine).await;
    assert_eq!(written, -1, "a newer value is stored");
    let kept: Vec<u8> = conn.get(VALUE).await.expect("GET");
    assert_eq!(kept, stored_at(now + 60_000));
    assert!(
        !exists(&mut conn, LOCK).await,
        "a superseded fenced write releases its lock"
    );
    let _: () = conn.set(LOCK, "my-token").await.expect("SET lock");
    let (put_written, _now) = put_script(&mut conn, &mine, 0).await; // no deadline
    assert_eq!(put_written, 0, "superseded");
    assert!(
        exists(&mut conn, LOCK).await,
        "a superseded put leaves the lock"
    );

    let far = stored_at(now + MAX_CLOCK_SKEW_MS + HOUR_MS);
    let _: () = conn.set(VALUE, &far).await.expect("plant");
    let written = fenced_write(&mut conn, &mine).await;
    assert_eq!(written, 1, "garbage from the future is replaced");
    let _: () = conn.set(VALUE, &far).await.expect("plant");
    let (put_written, _now) = put_script(&mut conn, &mine, 0).await; // no deadline
    assert_eq!(put_written, 1);
    let kept = read_envelope::<String>(&mut conn, VALUE)
        .await
        .expect("stored");
    assert!(
        kept.written_at_ms >= now && kept.written_at_ms < now + MAX_CLOCK_SKEW_MS,
        "the script stamped the server's clock over the caller's"
    );
    assert_eq!(
        (kept.value.as_str(), kept.fresh_until_ms),
        ("mine", kept.written_at_ms + HOUR_MS),
        "fresh_until moved with written_at, keeping the life given"
    );
}

/// A put superseded by another schema's newer copy drops its own schema's copy and lock, older
/// than the put: the newer write may not have known them (a process not yet settled on its
/// generation keeps copies only it reads), and its writer would read its own copy back, older
/// than its own put. (Found by `echostore check --faults all`: `read_your_writes` after an outage.)
/// Superseded by its own schema's copy, it leaves everything as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_superseded_by_another_schemas_copy_drops_its_own() {
    const OTHER_VALUE: &str = "nw:{1}#1.5";
    const OTHER_LOCK: &str = "lock:nw:{1}#1.5";
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let now = unix_ms();
    let older = envelope(now + HOUR_MS, now - 1_000, &"older");
    let newer = envelope(now + HOUR_MS, now + 60_000, &"newer");
    let put = envelope(now + HOUR_MS, now, &"put");
    let put_over = async |conn: &mut common::RawConn| -> i64 {
        let (written, _at): (i64, u64) = redis::Script::new(PUT_SCRIPT)
            .key(VALUE)
            .key(LOCK)
            .key(OTHER_VALUE)
            .key(OTHER_LOCK)
            .arg(&put)
            .arg(60_000)
            .arg(0)
            .invoke_async(conn)
            .await
            .expect("put");
        written
    };

    // This schema's copy and a fill's lock on it, and the other schema's copy.
    let plant = async |conn: &mut common::RawConn, own: &[u8], other: &[u8]| {
        let _: () = redis::pipe()
            .set(VALUE, own)
            .set(LOCK, "a fill's token")
            .set(OTHER_VALUE, other)
            .query_async(conn)
            .await
            .expect("plant");
    };

    plant(&mut conn, &older, &newer).await;
    assert_eq!(put_over(&mut conn).await, 0, "superseded");
    assert!(
        !exists(&mut conn, VALUE).await && !exists(&mut conn, LOCK).await,
        "its own older copy and its lock are gone"
    );
    let kept: Vec<u8> = conn.get(OTHER_VALUE).await.expect("GET");
    assert_eq!(kept, newer, "the newer copy stands");

    plant(&mut conn, &newer, &older).await;
    assert_eq!(put_over(&mut conn).await, 0, "superseded by its own copy");
    let kept: Vec<u8> = conn.get(VALUE).await.expect("GET");
    assert_eq!(kept, newer);
    assert!(exists(&mut conn, LOCK).await && exists(&mut conn, OTHER_VALUE).await);
}

/// A put carries a deadline on the server's clock (its caller's timeout from when it was sent):
/// arriving after it, the script writes nothing and says so, so a put its caller gave up on (a
/// silent link that heals later) cannot land over newer writes. Before it, the put writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_past_its_deadline_writes_nothing() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let (secs, micros) = server_time(&mut conn).await;
    let server_now = secs * 1000 + micros / 1000;
    let now = unix_ms();
    let stored = envelope(now + HOUR_MS, now, &"stored");
    let late = envelope(now + HOUR_MS, now, &"late");
    let _: () = conn.set(VALUE, &stored).await.expect("plant");
    let _: () = conn.set(LOCK, "a fill's token").await.expect("SET lock");

    let (written, at) = put_script(&mut conn, &late, server_now - 1).await;
    assert_eq!(written, -2, "too late");
    assert!(at >= server_now, "the reply carries the server's time");
    let kept: Vec<u8> = conn.get(VALUE).await.expect("GET");
    assert_eq!(kept, stored, "nothing written");
    assert!(exists(&mut conn, LOCK).await, "the lock left alone");

    let (written, _) = put_script(&mut conn, &late, server_now + HOUR_MS).await;
    assert_eq!(written, 1, "in time");
    let value = read_envelope::<String>(&mut conn, VALUE)
        .await
        .expect("stored");
    assert_eq!(value.value, "late");
}

/// Through the library: a put held on a link until well past its caller's timeout is refused
/// when it finally reaches Valkey, and answers its caller with an error (a timeout, or
/// `WriteTooLate` if the reply arrives in time after all); a newer put made meanwhile stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_held_past_its_timeout_never_lands() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let proxy = Proxy::start(&valkey.url()).await;
    let source = Source::open();
    let a_store = patient_store(&proxy.url(), Duration::from_millis(200)).await;
    let a = table_on(&a_store, &source).await;
    a.put(&1, "first".into()).await.expect("A's first put"); // loads the script, reads the clock

    proxy.hold();
    let late = a.put(&1, "late".into()).await;
    assert!(late.is_err(), "the held put timed out: {late:?}");
    let (secs, _) = server_time(&mut conn).await;
    until_async(
        "the held put's deadline has passed on the server",
        async || {
            let (now, _) = server_time(&mut conn).await;
            now > secs + 1
        },
    )
    .await;
    let _: () = conn
        .set(VALUE, envelope(unix_ms() + HOUR_MS, unix_ms(), &"newer"))
        .await
        .expect("a newer write lands meanwhile");
    let sets = common::command_calls(&mut conn, "set").await;
    assert!(a_store.is_degraded(), "the timeout opened A's breaker");
    proxy.release();
    until("the held requests went through", || proxy.waiting() == 0).await;
    // The failed put's repair (a DEL, the breaker's trial) follows it on A's connection; its
    // success closes A's breaker, so by then the held put has run.
    until("A's repair landed after the held put", || {
        !a_store.is_degraded()
    })
    .await;
    assert_eq!(
        common::command_calls(&mut conn, "set").await,
        sets,
        "the put its caller gave up on never set the value (its script ran no SET)"
    );
    let stored = read_envelope::<String>(&mut conn, VALUE).await;
    assert_ne!(stored.map(|s| s.value).as_deref(), Some("late"));
}

/// The scripts once published under `protocol` keep their names, deprecated, for one release.
#[test]
#[allow(deprecated)]
fn the_old_script_names_are_the_same_scripts() {
    assert_eq!(echostore::protocol::PUT_SCRIPT, PUT_SCRIPT);
    assert_eq!(
        echostore::protocol::FENCED_WRITE_SCRIPT,
        FENCED_WRITE_SCRIPT
    );
}
