//! A loader that fails or panics fails all its waiters with one error, caches nothing, and leaves
//! the table serving.

use crate::common;

use std::sync::Arc;

use common::{BACKENDS, Source, answers, herd, local_table, settled, until_stats};
use echostore::{Error, Store};

/// Ten waiters of a failing load all receive the very same error; nothing is cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loader_error_reaches_every_waiter_and_is_not_cached() {
    for backend in BACKENDS {
        let source = Source::gated();
        let table = local_table("fails", &source, |t| {
            t.l1_backend(backend).loader(source.answering(|id, n| {
                if n == 1 {
                    Err(std::io::Error::other(format!("source down for {id}")))
                } else {
                    Ok(format!("ok-{id}"))
                }
            }))
        })
        .await;

        let waiters = herd(&table, 10, 1);
        until_stats(&table, "all ten wait", |s| s.coalesced == 9).await;
        source.release();
        let errors: Vec<_> = answers(waiters)
            .await
            .into_iter()
            .map(|a| a.expect_err("the load failed"))
            .collect();
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
        assert_eq!(
            table.stats().in_flight,
            0,
            "{backend:?}: the failed flight is gone"
        );

        // Not cached: the next get reads the source again and succeeds.
        assert_eq!(*table.get(&1).await.expect("retry"), "ok-1");
        assert_eq!(source.calls(), 2, "{backend:?}");
        settled(&table).await;
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
        .build()
        .await
        .expect("table");

    for answer in answers(herd(&table, 5, 13)).await {
        let err = answer.expect_err("the loader panicked");
        assert!(
            matches!(&err, Error::LoaderPanicked(m) if m.contains("unlucky id 13")),
            "{err}"
        );
        assert!(err.is_source());
    }
    assert_eq!(*table.get(&4).await.expect("the table still serves"), 8);
    settled(&table).await;
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
        .build()
        .await
        .expect("table");
    let err = table.get(&13).await.expect_err("panicked");
    assert!(matches!(err, Error::LoaderPanicked(_)), "{err}");
    assert_eq!(*table.get(&2).await.expect("still serving"), 2);
    settled(&table).await;
}
