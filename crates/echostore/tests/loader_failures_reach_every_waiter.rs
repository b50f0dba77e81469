//! A loader that fails or panics fails all its waiters with one error, caches nothing, and leaves
//! the table serving.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{BACKENDS, until_stats};
use echostore::{Error, Store};
use tokio::sync::watch;

/// Ten waiters of a failing load all receive the very same error; nothing is cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loader_error_reaches_every_waiter_and_is_not_cached() {
    for backend in BACKENDS {
        let calls = Arc::new(AtomicUsize::new(0));
        let (gate, _) = watch::channel(false);
        let store = Store::builder().build().await.expect("store");
        let table = store
            .table::<u64, String>("fails")
            .l1_backend(backend)
            .loader({
                let calls = Arc::clone(&calls);
                let gate = gate.clone();
                move |id: u64| {
                    let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                    let mut open = gate.subscribe();
                    async move {
                        let _ = open.wait_for(|o| *o).await;
                        if n == 1 {
                            Err(std::io::Error::other(format!("source down for {id}")))
                        } else {
                            Ok(format!("ok-{id}"))
                        }
                    }
                }
            })
            .start()
            .await
            .expect("table");

        let waiters: Vec<_> = (0..10)
            .map(|_| {
                let table = table.clone();
                tokio::spawn(async move { table.get(&1).await })
            })
            .collect();
        until_stats("all ten wait", || table.stats(), |s| s.coalesced == 9).await;
        gate.send_replace(true);
        let mut errors = Vec::new();
        for w in waiters {
            errors.push(w.await.expect("task").expect_err("the load failed"));
        }
        let Error::Source(first) = &errors[0] else {
            panic!("{backend:?}: not a source error: {}", errors[0]);
        };
        assert!(first.to_string().contains("source down for 1"));
        for e in &errors {
            assert!(
                matches!(e, Error::Source(s) if Arc::ptr_eq(s, first)),
                "one shared error"
            );
        }
        assert_eq!(table.stats().errors, 1);

        // Not cached: the next get reads the source again and succeeds.
        assert_eq!(*table.get(&1).await.expect("retry"), "ok-1");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{backend:?}");
    }
}

/// A panicking loader fails its waiters (no hang), and the same table keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_loader_fails_its_waiters_and_the_table_keeps_serving() {
    let store = Store::builder().build().await.expect("store");
    let table = store
        .table::<u64, u64>("panics")
        .loader(|id: u64| async move {
            if id == 13 {
                panic!("unlucky id {id}");
            }
            Ok::<_, std::io::Error>(id * 2)
        })
        .start()
        .await
        .expect("table");

    let waiters: Vec<_> = (0..5)
        .map(|_| {
            let table = table.clone();
            tokio::spawn(async move { table.get(&13).await })
        })
        .collect();
    for w in waiters {
        let err = w.await.expect("task").expect_err("the loader panicked");
        assert!(
            matches!(&err, Error::LoaderPanicked(m) if m.contains("unlucky id 13")),
            "{err}"
        );
        assert!(err.is_source());
    }
    assert_eq!(*table.get(&4).await.expect("the table still serves"), 8);
    assert_eq!(table.stats().in_flight, 0);
    assert_eq!(table.stats().owner_restarts, 0, "the owner never died");
}

/// A loader that panics before returning its future is caught the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loader_panicking_synchronously_is_caught() {
    let store = Store::builder().build().await.expect("store");
    let table = store
        .table::<u64, u64>("panics-early")
        .loader(
            |id: u64| -> std::future::Ready<Result<u64, std::io::Error>> {
                assert!(id != 13, "refused {id}");
                std::future::ready(Ok(id))
            },
        )
        .start()
        .await
        .expect("table");
    let err = table.get(&13).await.expect_err("panicked");
    assert!(matches!(err, Error::LoaderPanicked(_)), "{err}");
    assert_eq!(*table.get(&2).await.expect("still serving"), 2);
}
