//! A batch loader that panics or hangs: every id that call was asked for gets the error, the ids
//! of the batch answered from the caches are unaffected, each id's lock is released and nothing
//! is written, so the next read of those ids loads again.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{exists, raw, store_on, valkey};
use echostore::{Error, Origin, Table, TableBuilder};

/// What the batch loader does at one call.
#[derive(Clone, Copy)]
enum Step {
    /// Panics when called, before it returns a future.
    PanicsWhenCalled,
    /// Returns a future that panics when polled.
    PanicsWhenPolled,
    /// Never answers.
    Hangs,
    /// Answers every id asked for.
    Answers,
}

/// `batched`, loaded only by a batch loader that does `script(n)` at its n-th call (1-based);
/// then `tune`.
async fn table(
    url: &str,
    script: fn(usize) -> Step,
    tune: impl FnOnce(TableBuilder<u64, String>) -> TableBuilder<u64, String>,
) -> (Table<u64, String>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let builder = store_on(url)
        .await
        .table::<u64, String>("batched")
        .batch_loader(move |ids: Vec<u64>| {
            let step = script(counted.fetch_add(1, Ordering::SeqCst) + 1);
            assert!(
                !matches!(step, Step::PanicsWhenCalled),
                "the batch loader exploded when called"
            );
            async move {
                match step {
                    Step::PanicsWhenPolled => panic!("the batch loader exploded when polled"),
                    Step::Hangs => std::future::pending().await,
                    Step::PanicsWhenCalled | Step::Answers => {}
                }
                Ok::<_, std::io::Error>(
                    ids.into_iter()
                        .map(|id| (id, format!("row {id}")))
                        .collect::<HashMap<_, _>>(),
                )
            }
        });
    (tune(builder).build().await.expect("table"), calls)
}

/// A batch loader that panics, when called or when polled: its ids get `LoaderPanicked`, an id
/// of the same batch read from L1 answers, the locks are released, nothing is written, and the
/// next batch read loads those ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_batch_loader_fails_only_its_ids_and_releases_their_locks() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let (t, calls) = table(
        &valkey.url(),
        |n| match n {
            1 => Step::PanicsWhenCalled,
            2 => Step::PanicsWhenPolled,
            _ => Step::Answers,
        },
        |t| t,
    )
    .await;
    t.put(&1, "put".to_owned()).await.expect("put");

    for at in ["called", "polled"] {
        let answers: HashMap<u64, _> = t.fetch_many([1, 2, 3]).await.into_iter().collect();
        assert_eq!(answers[&1].as_ref().expect("L1").origin, Origin::L1);
        for id in [2, 3] {
            let err = answers[&id]
                .as_ref()
                .expect_err("the batch loader panicked");
            assert!(
                matches!(err, Error::LoaderPanicked(m) if m.contains(&format!("exploded when {at}"))),
                "{err}"
            );
            assert!(
                !exists(&mut conn, format!("lock:batched:{{{id}}}")).await,
                "id {id}'s lock"
            );
            assert!(
                !exists(&mut conn, format!("batched:{{{id}}}")).await,
                "id {id} unwritten"
            );
        }
    }

    let loaded = t.get_many([2, 3]).await.expect("the third call answers");
    assert_eq!(loaded.len(), 2);
    assert_eq!(*loaded[&2], "row 2");
    assert_eq!(calls.load(Ordering::SeqCst), 3, "one call per batch read");
    assert_eq!(t.stats().owner_restarts, 0);
}

/// A batch loader that never answers: `load_timeout` fails each of its ids with `LoadTimeout`
/// and releases their locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_batch_loader_times_out_and_releases_the_locks() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let limit = Duration::from_millis(100);
    let (t, calls) = table(&valkey.url(), |_| Step::Hangs, |t| t.load_timeout(limit)).await;

    for (id, answer) in t.fetch_many([1, 2]).await {
        let err = answer.expect_err("timed out");
        assert!(matches!(err, Error::LoadTimeout(l) if l == limit), "{err}");
        assert!(
            !exists(&mut conn, format!("lock:batched:{{{id}}}")).await,
            "id {id}'s lock"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one call for the batch");
    let s = t.stats();
    assert_eq!((s.in_flight, s.owner_restarts), (0, 0), "{s:?}");
    assert!(s.load_timeouts >= 1, "{s:?}");
}
