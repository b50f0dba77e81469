//! A loader that fails, panics or hangs: its waiters get one error (or, where the table allows, a
//! stale copy), nothing is cached, and the regeneration lock is released for the next attempt.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{
    Source, answers, exists, herd, raw, settled, stale_on_valkey, store_on, until_async,
    until_stats, valkey, valkey_table,
};
use echostore::{Error, LoserPolicy, Origin};
use redis::AsyncCommands;

const VALUE: &str = "flaky:{1}";
const LOCK: &str = "lock:flaky:{1}";

/// A failing load: the same error for every waiter, lock released, nothing written, next get retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_loader_releases_the_lock_and_is_retried() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let t = valkey_table(&valkey.url(), "flaky", &source, |t| {
        t.jitter(0.0).loader(source.answering(|_, n| {
            if n == 1 {
                Err(std::io::Error::other("db down"))
            } else {
                Ok(format!("ok after {n}"))
            }
        }))
    })
    .await;

    let err = t.get(&1).await.expect_err("the load failed");
    assert!(
        matches!(&err, Error::Source(e) if e.to_string() == "db down"),
        "{err}"
    );
    assert!(!exists(&mut conn, LOCK).await, "the lock was released");
    assert!(!exists(&mut conn, VALUE).await, "nothing was written");
    let s = t.stats();
    assert_eq!((s.lock_won, s.released, s.errors, s.l1_len), (1, 1, 1, 0));

    assert_eq!(*t.get(&1).await.expect("retried"), "ok after 2");
    assert_eq!(source.calls(), 2);
    settled(&t).await;
}

/// A panicking load under the lock: an error for its waiters, the lock released, the table serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_loader_releases_the_lock() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let t = valkey_table(&valkey.url(), "flaky", &source, |t| {
        t.jitter(0.0).loader(source.answering(|_, n| {
            assert!(n != 1, "the source exploded");
            Ok("fine".into())
        }))
    })
    .await;

    let err = t.get(&1).await.expect_err("panicked");
    assert!(
        matches!(&err, Error::LoaderPanicked(m) if m.contains("exploded")),
        "{err}"
    );
    assert!(!exists(&mut conn, LOCK).await, "the lock was released");
    assert_eq!(*t.get(&1).await.expect("serving"), "fine");
    settled(&t).await;
}

/// Fail-safe: a failed load with a stale copy at hand serves the copy, counted, instead of the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_safe_serves_the_stale_copy_when_the_load_fails() {
    const TTL: Duration = Duration::from_millis(30);
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let t = valkey_table(&valkey.url(), "flaky", &source, |t| {
        t.jitter(0.0)
            .ttl(TTL)
            .stale_for(Duration::from_secs(60))
            .fail_safe(true)
            .loader(source.answering(|_, n| {
                if n == 1 {
                    Ok("the copy".into())
                } else {
                    Err(std::io::Error::other("db down"))
                }
            }))
    })
    .await;

    assert_eq!(
        t.fetch(&1).await.expect("first load").origin,
        Origin::Loaded
    );
    // The copy must be stale in both places the fetch looks. The ttl passing is the behaviour
    // itself, and L1 has no probe that would not load: its deadline (real monotonic time, exact)
    // was set by the flight before it answered, so it has passed once TTL has since `loaded`.
    // Valkey's copy is judged by its envelope, which the test reads as the table does.
    let loaded = Instant::now();
    until_async("the copy went stale in L1 and on Valkey", async || {
        loaded.elapsed() >= TTL && stale_on_valkey(&mut conn, VALUE).await
    })
    .await;
    let f = t.fetch(&1).await.expect("fail-safe answer");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Stale, "the copy"));
    assert!(f.stale_by.is_some());
    let s = t.stats();
    assert_eq!(
        (s.fail_safe_served, s.stale_served, s.source_reads),
        (1, 1, 2)
    );
    settled(&t).await;

    // Without fail-safe the same failure is an error.
    let failing = Source::open();
    let strict = valkey_table(&valkey.url(), "flaky", &failing, |t| {
        t.jitter(0.0)
            .ttl(TTL)
            .loader(failing.answering(|_, _| Err(std::io::Error::other("db down"))))
    })
    .await;
    assert!(strict.get(&1).await.expect_err("no fail-safe").is_source());
    settled(&strict).await;
}

/// Fail-safe serves a stale copy for a load that *failed*, not for one that found the row gone:
/// a batch loader that leaves the id out answers `Absent`, and a `get` with a stale copy at hand
/// answers `Absent` too, as `get_many` does (before, the `get` served the copy of the deleted
/// row as `Origin::Stale`, counted as `fail_safe_served`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_safe_serves_no_copy_of_a_row_the_source_no_longer_has() {
    const TTL: Duration = Duration::from_millis(30);
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let gone = Arc::new(AtomicBool::new(false));
    let rows = Arc::clone(&gone);
    // The batch loader alone: a per-id loader answers or fails, it never says "gone".
    let t = store_on(&valkey.url())
        .await
        .table::<u64, String>("flaky")
        .jitter(0.0)
        .ttl(TTL)
        .stale_for(Duration::from_secs(60))
        .fail_safe(true)
        .batch_loader(move |ids: Vec<u64>| {
            let gone = rows.load(Ordering::SeqCst);
            async move {
                let found = ids.into_iter().filter(|_| !gone);
                Ok::<_, std::io::Error>(found.map(|id| (id, format!("row {id}"))).collect())
            }
        })
        .build()
        .await
        .expect("table");

    assert_eq!(*t.get(&1).await.expect("loaded"), "row 1");
    let loaded = Instant::now();
    until_async("the copy went stale in L1 and on Valkey", async || {
        loaded.elapsed() >= TTL && stale_on_valkey(&mut conn, VALUE).await
    })
    .await;
    gone.store(true, Ordering::SeqCst);

    let err = t.get(&1).await.expect_err("the row is gone");
    assert!(err.is_absent(), "{err}");
    assert!(t.get_many([1]).await.expect("a batch").is_empty());
    let s = t.stats();
    assert_eq!(
        (s.fail_safe_served, s.stale_served, s.errors),
        (0, 0, 0),
        "{s:?}"
    );
    assert!(!exists(&mut conn, LOCK).await, "the lock was released");
}

/// A hanging load: `load_timeout` fails every waiter with `LoadTimeout` and releases the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_loader_times_out_and_releases_the_lock() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let limit = Duration::from_millis(100);
    let hanging = Source::gated(); // never released
    let t = valkey_table(&valkey.url(), "flaky", &hanging, |t| {
        t.jitter(0.0).load_timeout(limit).losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_secs(60),
        })
    })
    .await;

    // Another process holds the lock while the five callers arrive, so their flight polls and
    // has not started the load: every caller joins it before the 100 ms can run out, however
    // slowly the callers are scheduled (a caller arriving after the timeout would start a flight
    // and a load of its own). The flight polls for up to 60 s, longer than `until` may wait.
    let _: () = redis::cmd("SET")
        .arg(LOCK)
        .arg("another-process")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .expect("SET lock");
    let waiters = herd(&t, 5, 1);
    until_stats(&t, "all five callers joined the polling flight", |s| {
        s.coalesced == 4 && s.poll_waits > 0
    })
    .await;
    // The other process gives up without writing: the flight takes the lock and loads.
    let _: () = conn.del(LOCK).await.expect("DEL lock");
    for answer in answers(waiters).await {
        let err = answer.expect_err("timed out");
        assert!(matches!(err, Error::LoadTimeout(l) if l == limit), "{err}");
    }
    assert!(!exists(&mut conn, LOCK).await, "the lock was released");
    let s = t.stats();
    assert_eq!((s.load_timeouts, s.source_reads, s.in_flight), (1, 1, 0));
    assert_eq!(hanging.calls(), 1);
}

/// The soft timeout: past it the waiters get the stale copy at once, and the load, when it
/// finishes, fills the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_load_past_the_soft_timeout_serves_stale_then_fills() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    // An earlier fill (another store) leaves a copy on Valkey whose logical life is short. The
    // table under test keeps what it loads for a minute, so the refill is still fresh in L1 when
    // the test looks, however slowly the test runs.
    let earlier = valkey_table(&valkey.url(), "flaky", &source, |t| {
        t.ttl(Duration::from_millis(30))
            .jitter(0.0)
            .stale_for(Duration::from_secs(60))
    })
    .await;
    let t = valkey_table(&valkey.url(), "flaky", &source, |t| {
        t.ttl(Duration::from_secs(60))
            .jitter(0.0)
            .stale_for(Duration::from_secs(60))
            .soft_timeout(Duration::from_millis(20))
    })
    .await;
    earlier.get(&1).await.expect("first load");
    settled(&earlier).await;
    // `t`'s L1 is empty: the only copy is Valkey's, stale once its envelope says so.
    until_async("the copy on Valkey went stale", async || {
        stale_on_valkey(&mut conn, VALUE).await
    })
    .await;
    source.hold(); // the second load is slow

    let f = t.fetch(&1).await.expect("stale at the soft timeout");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Stale, "value-1-1"));
    assert_eq!(t.stats().in_flight, 1, "the load goes on");
    source.release();
    settled(&t).await; // the slow load landed
    let f = t.fetch(&1).await.expect("refilled");
    // From L1, or from Valkey when the refill's own write came back as a coherence push and
    // dropped the L1 copy (docs/coherence.md): either way the cache, not the source, answers.
    assert!(
        matches!(f.origin, Origin::L1 | Origin::L2),
        "{:?}",
        f.origin
    );
    assert_eq!(f.value.as_str(), "value-1-2");
    let stored: Vec<u8> = conn.get(VALUE).await.expect("GET");
    assert!(
        stored.ends_with(b"value-1-2"),
        "Valkey holds the new value too"
    );
    assert_eq!(t.stats().soft_timeouts, 1);
    assert_eq!(source.calls(), 2);
}
