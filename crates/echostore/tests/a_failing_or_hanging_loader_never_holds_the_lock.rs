//! A loader that fails, panics or hangs: its waiters get one error (or, where the table allows, a
//! stale copy), nothing is cached, and the regeneration lock is released for the next attempt.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{raw, store_on, until, valkey};
use echostore::{Error, LoserPolicy, Origin, Table};
use redis::AsyncCommands;

const VALUE: &str = "flaky:{1}";
const LOCK: &str = "lock:flaky:{1}";

/// How the test source answers its n-th read (1-based).
type Script = fn(usize) -> Option<Result<String, std::io::Error>>;

/// A table over a source that follows `script`; `None` means "hang forever".
async fn table(
    url: &str,
    calls: &Arc<AtomicUsize>,
    script: Script,
    tune: impl FnOnce(echostore::TableBuilder<u64, String>) -> echostore::TableBuilder<u64, String>,
) -> Table<u64, String> {
    let calls = Arc::clone(calls);
    let builder = store_on(url)
        .await
        .table::<u64, String>("flaky")
        .jitter(0.0)
        .loader(move |_id: u64| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                match script(n) {
                    Some(answer) => answer,
                    None => std::future::pending().await,
                }
            }
        });
    tune(builder).start().await.expect("table")
}

/// A failing load: the same error for every waiter, lock released, nothing written, next get retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_loader_releases_the_lock_and_is_retried() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let t = table(
        &valkey.url(),
        &calls,
        |n| {
            Some(if n == 1 {
                Err(std::io::Error::other("db down"))
            } else {
                Ok(format!("ok after {n}"))
            })
        },
        |b| b,
    )
    .await;

    let err = t.get(&1).await.expect_err("the load failed");
    assert!(
        matches!(&err, Error::Source(e) if e.to_string() == "db down"),
        "{err}"
    );
    assert!(
        !conn.exists::<_, bool>(LOCK).await.expect("EXISTS"),
        "the lock was released"
    );
    assert!(
        !conn.exists::<_, bool>(VALUE).await.expect("EXISTS"),
        "nothing was written"
    );
    let s = t.stats();
    assert_eq!((s.lock_won, s.released, s.errors, s.l1_len), (1, 1, 1, 0));

    assert_eq!(*t.get(&1).await.expect("retried"), "ok after 2");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A panicking load under the lock: an error for its waiters, the lock released, the table serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_loader_releases_the_lock() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let t = table(
        &valkey.url(),
        &calls,
        |n| {
            assert!(n != 1, "the source exploded");
            Some(Ok("fine".into()))
        },
        |b| b,
    )
    .await;

    let err = t.get(&1).await.expect_err("panicked");
    assert!(
        matches!(&err, Error::LoaderPanicked(m) if m.contains("exploded")),
        "{err}"
    );
    assert!(
        !conn.exists::<_, bool>(LOCK).await.expect("EXISTS"),
        "the lock was released"
    );
    assert_eq!(*t.get(&1).await.expect("serving"), "fine");
}

/// Fail-safe: a failed load with a stale copy at hand serves the copy, counted, instead of the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_safe_serves_the_stale_copy_when_the_load_fails() {
    let valkey = valkey();
    let calls = Arc::new(AtomicUsize::new(0));
    let t = table(
        &valkey.url(),
        &calls,
        |n| {
            Some(if n == 1 {
                Ok("the copy".into())
            } else {
                Err(std::io::Error::other("db down"))
            })
        },
        |b| {
            b.ttl(Duration::from_millis(30))
                .stale_for(Duration::from_secs(60))
                .fail_safe(true)
        },
    )
    .await;

    assert_eq!(
        t.fetch(&1).await.expect("first load").origin,
        Origin::Loaded
    );
    let start = std::time::Instant::now();
    until("the copy went stale", || {
        start.elapsed() > Duration::from_millis(40)
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

    // Without fail-safe the same failure is an error.
    let strict = table(
        &valkey.url(),
        &calls,
        |_| Some(Err(std::io::Error::other("db down"))),
        |b| b.ttl(Duration::from_millis(30)),
    )
    .await;
    assert!(strict.get(&1).await.expect_err("no fail-safe").is_source());
}

/// A hanging load: `load_timeout` fails every waiter with `LoadTimeout` and releases the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_loader_times_out_and_releases_the_lock() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let limit = Duration::from_millis(100);
    let t = table(
        &valkey.url(),
        &calls,
        |_| None,
        |b| {
            b.load_timeout(limit).losers(LoserPolicy::Poll {
                every: Duration::from_millis(10),
                up_to: Duration::from_secs(60),
            })
        },
    )
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
    let waiters: Vec<_> = (0..5)
        .map(|_| {
            let t = t.clone();
            tokio::spawn(async move { t.get(&1).await })
        })
        .collect();
    until("all five callers joined the polling flight", || {
        let s = t.stats();
        s.coalesced == 4 && s.poll_waits > 0
    })
    .await;
    // The other process gives up without writing: the flight takes the lock and loads.
    let _: () = conn.del(LOCK).await.expect("DEL lock");
    for w in waiters {
        let err = w.await.expect("task").expect_err("timed out");
        assert!(matches!(err, Error::LoadTimeout(l) if l == limit), "{err}");
    }
    assert!(
        !conn.exists::<_, bool>(LOCK).await.expect("EXISTS"),
        "the lock was released"
    );
    let s = t.stats();
    assert_eq!((s.load_timeouts, s.source_reads, s.in_flight), (1, 1, 0));
}

/// The soft timeout: past it the waiters get the stale copy at once, and the load, when it
/// finishes, fills the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_load_past_the_soft_timeout_serves_stale_then_fills() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let loader = {
        let gate = Arc::clone(&gate);
        move |_id: u64| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            let gate = Arc::clone(&gate);
            async move {
                if n > 1 {
                    gate.notified().await; // the second load is slow
                }
                Ok::<_, std::io::Error>(format!("load {n}"))
            }
        }
    };
    // An earlier fill (another store) leaves a copy on Valkey whose logical life is short. The
    // table under test keeps what it loads for a minute, so the refill is still fresh in L1 when
    // the test looks, however slowly the test runs.
    let earlier = store_on(&valkey.url())
        .await
        .table::<u64, String>("flaky")
        .ttl(Duration::from_millis(30))
        .jitter(0.0)
        .stale_for(Duration::from_secs(60))
        .loader(loader.clone())
        .start()
        .await
        .expect("earlier table");
    let t = store_on(&valkey.url())
        .await
        .table::<u64, String>("flaky")
        .ttl(Duration::from_secs(60))
        .jitter(0.0)
        .stale_for(Duration::from_secs(60))
        .soft_timeout(Duration::from_millis(20))
        .loader(loader)
        .start()
        .await
        .expect("table");
    earlier.get(&1).await.expect("first load");
    let start = std::time::Instant::now();
    until("the copy went stale", || {
        start.elapsed() > Duration::from_millis(40)
    })
    .await;

    let f = t.fetch(&1).await.expect("stale at the soft timeout");
    assert_eq!((f.origin, f.value.as_str()), (Origin::Stale, "load 1"));
    assert_eq!(t.stats().in_flight, 1, "the load goes on");
    gate.notify_one();
    until("the slow load landed", || t.stats().in_flight == 0).await;
    let f = t.fetch(&1).await.expect("refilled");
    assert_eq!((f.origin, f.value.as_str()), (Origin::L1, "load 2"));
    let stored: Vec<u8> = conn.get(VALUE).await.expect("GET");
    assert!(
        stored.ends_with(b"load 2"),
        "Valkey holds the new value too"
    );
    assert_eq!(t.stats().soft_timeouts, 1);
}
