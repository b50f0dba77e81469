//! A reloader that fails, panics or hangs is treated as a loader that does: the read gets the
//! error (or, where the table allows, the stale copy), the regeneration lock is released, and the
//! copy on Valkey is left as it was, so the next read asks the reloader again.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Source, exists, raw, read_envelope, settled, until_async, valkey, valkey_table};
use echostore::{Error, Origin, Reload, Table, TableBuilder};

const VALUE: &str = "unreloadable:{1}";
const LOCK: &str = "lock:unreloadable:{1}";
/// A life short enough to pass within a test.
const SHORT: Duration = Duration::from_millis(40);

/// What the reloader does at one call.
#[derive(Clone, Copy)]
enum Step {
    /// Panics when called, before it returns a future.
    PanicsWhenCalled,
    /// Returns a future that panics when polled.
    PanicsWhenPolled,
    /// Answers a source error.
    Fails,
    /// Never answers.
    Hangs,
    /// Answers `Unchanged`.
    Unchanged,
}

/// The reloader's calls so far, and what it does at its n-th (1-based).
struct Reloads {
    calls: AtomicUsize,
    script: fn(usize) -> Step,
}

/// `unreloadable`, its values fresh for [`SHORT`] and servable stale for a minute, loaded from
/// `source` and reloaded by `reloads`' script; then `tune`.
async fn table(
    url: &str,
    source: &Source,
    reloads: &Arc<Reloads>,
    tune: impl FnOnce(TableBuilder<u64, String>) -> TableBuilder<u64, String>,
) -> Table<u64, String> {
    let reloads = Arc::clone(reloads);
    valkey_table(url, "unreloadable", source, |t| {
        let t = t
            .ttl(SHORT)
            .jitter(0.0)
            .early_refresh(0.0)
            .stale_for(Duration::from_secs(60))
            .reloader(move |_id: u64, _old: Arc<String>| {
                let n = reloads.calls.fetch_add(1, Ordering::SeqCst) + 1;
                let step = (reloads.script)(n);
                assert!(
                    !matches!(step, Step::PanicsWhenCalled),
                    "the reloader exploded when called"
                );
                async move {
                    match step {
                        Step::PanicsWhenPolled => panic!("the reloader exploded when polled"),
                        Step::Fails => Err(std::io::Error::other("source down")),
                        Step::Hangs => std::future::pending().await,
                        Step::PanicsWhenCalled | Step::Unchanged => Ok(Reload::Unchanged),
                    }
                }
            });
        tune(t)
    })
    .await
}

/// Id 1 loaded, and its copy past its freshness: the next read of it asks the reloader.
async fn loaded_then_stale(t: &Table<u64, String>) -> String {
    let loaded = t.get(&1).await.expect("the load");
    until_async("the copy's freshness ended", async || {
        t.peek(&1).await.expect("peek").is_none()
    })
    .await;
    loaded.to_string()
}

/// A reloader that panics, when called or when polled: the read gets `LoaderPanicked`, the lock
/// is released, the copy stays on Valkey untouched, and the next read asks the reloader again
/// (never the loader: the copy is still in its stale window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_reloader_releases_the_lock_and_leaves_the_copy() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let reloads = Arc::new(Reloads {
        calls: AtomicUsize::new(0),
        script: |n| match n {
            1 => Step::PanicsWhenCalled,
            2 => Step::PanicsWhenPolled,
            _ => Step::Unchanged,
        },
    });
    let t = table(&valkey.url(), &source, &reloads, |t| t).await;
    let copy = loaded_then_stale(&t).await;

    for at in ["called", "polled"] {
        let err = t.get(&1).await.expect_err("the reloader panicked");
        assert!(
            matches!(&err, Error::LoaderPanicked(m) if m.contains(&format!("exploded when {at}"))),
            "{err}"
        );
        assert!(!exists(&mut conn, LOCK).await, "the lock was released");
        let left = read_envelope::<String>(&mut conn, VALUE).await;
        assert_eq!(
            left.map(|c| c.value),
            Some(copy.clone()),
            "the copy is left"
        );
    }

    let renewed = t.fetch(&1).await.expect("the third call renews");
    assert_eq!(
        (renewed.value.as_str(), renewed.origin),
        (copy.as_str(), Origin::Loaded)
    );
    assert_eq!(
        (source.calls(), reloads.calls.load(Ordering::SeqCst)),
        (1, 3),
        "one load, three reloader calls"
    );
    let s = t.stats();
    assert_eq!(
        (s.errors, s.reloads_unchanged, s.in_flight),
        (2, 1, 0),
        "{s:?}"
    );
}

/// Fail-safe: a reloader that fails with the stale copy at hand serves the copy, counted, and
/// releases the lock; without fail-safe, the read gets the source's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_safe_serves_the_stale_copy_when_the_reloader_fails() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = Source::open();
    let reloads = Arc::new(Reloads {
        calls: AtomicUsize::new(0),
        script: |_| Step::Fails,
    });
    let t = table(&valkey.url(), &source, &reloads, |t| t.fail_safe(true)).await;
    let copy = loaded_then_stale(&t).await;

    let served = t.fetch(&1).await.expect("the fail-safe answer");
    assert_eq!(
        (served.value.as_str(), served.origin),
        (copy.as_str(), Origin::Stale)
    );
    assert!(!exists(&mut conn, LOCK).await, "the lock was released");
    let s = t.stats();
    assert_eq!((s.fail_safe_served, source.calls()), (1, 1), "{s:?}");
    settled(&t).await;

    let strict = table(&valkey.url(), &source, &reloads, |t| t).await;
    let err = strict.get(&1).await.expect_err("no fail-safe");
    assert!(
        matches!(&err, Error::Source(e) if e.to_string() == "source down"),
        "{err}"
    );
    assert!(!exists(&mut conn, LOCK).await, "the lock was released");
    assert_eq!(
        source.calls(),
        1,
        "a failed reload is not retried with the loader"
    );
}

/// A reloader that never answers: `load_timeout` fails the read with `LoadTimeout`, the lock is
/// released and the copy left, as for a hanging loader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_reloader_times_out_and_releases_the_lock() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let limit = Duration::from_millis(100);
    let source = Source::open();
    let reloads = Arc::new(Reloads {
        calls: AtomicUsize::new(0),
        script: |_| Step::Hangs,
    });
    let t = table(&valkey.url(), &source, &reloads, |t| t.load_timeout(limit)).await;
    let copy = loaded_then_stale(&t).await;

    let err = t.get(&1).await.expect_err("timed out");
    assert!(matches!(err, Error::LoadTimeout(l) if l == limit), "{err}");
    assert!(!exists(&mut conn, LOCK).await, "the lock was released");
    let left = read_envelope::<String>(&mut conn, VALUE).await;
    assert_eq!(left.map(|c| c.value), Some(copy), "the copy is left");
    let s = t.stats();
    assert_eq!(
        (s.load_timeouts, s.in_flight, source.calls()),
        (1, 0, 1),
        "{s:?}"
    );
}
