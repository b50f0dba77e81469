//! A caller that drops its future neither cancels the flight for the others nor leaves a waiter
//! behind.

mod common;

use common::{BACKENDS, Source, until_stats};
use echostore::{Origin, Store};

/// Nine of ten callers give up; the tenth gets the value, and the flight leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_callers_do_not_cancel_the_flight() {
    for backend in BACKENDS {
        let source = Source::gated();
        let store = Store::builder().build().await.expect("store");
        let table = store
            .table::<u64, String>("cancel")
            .l1_backend(backend)
            .loader(source.loader())
            .start()
            .await
            .expect("table");

        let callers: Vec<_> = (0..10)
            .map(|_| {
                let table = table.clone();
                tokio::spawn(async move { table.get(&3).await })
            })
            .collect();
        until_stats(
            "all ten are waiting",
            || table.stats(),
            |s| s.coalesced == 9,
        )
        .await;
        let mut callers = callers.into_iter();
        let stayer = callers.next().expect("ten callers");
        for quitter in callers {
            quitter.abort();
            assert!(quitter.await.expect_err("aborted").is_cancelled());
        }
        source.release();

        assert_eq!(*stayer.await.expect("task").expect("value"), "value-3-1");
        assert_eq!(source.calls(), 1);
        assert_eq!(
            table.stats().in_flight,
            0,
            "{backend:?}: no flight or waiter left"
        );
    }
}

/// Even when every caller gives up, the flight finishes and fills L1 for the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flight_everyone_left_still_fills_the_cache() {
    let source = Source::gated();
    let store = Store::builder().build().await.expect("store");
    let table = store
        .table::<u64, String>("abandoned")
        .loader(source.loader())
        .start()
        .await
        .expect("table");

    let caller = tokio::spawn({
        let table = table.clone();
        async move { table.get(&5).await }
    });
    until_stats(
        "the fill is in flight",
        || table.stats(),
        |s| s.in_flight == 1,
    )
    .await;
    caller.abort();
    let _ = caller.await;
    source.release();
    until_stats("the flight landed", || table.stats(), |s| s.in_flight == 0).await;

    let next = table.fetch(&5).await.expect("value");
    assert_eq!(next.origin, Origin::L1, "the abandoned flight filled L1");
    assert_eq!(source.calls(), 1);
}
