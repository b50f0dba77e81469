//! An owner that crashes answers its callers `Error::Stopped` at once and is restarted by the
//! store's supervisor; the table keeps serving.

use crate::common;

use std::sync::Arc;

use common::{POISON, Source, Touchy, on_task, settled, touchy, until, until_stats};
use echostore::{Error, Store};

/// Waiters of the dead owner get `Stopped` (no hang); the restarted owner serves the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_owner_answers_stopped_and_is_restarted() {
    let source = Source::gated();
    let store = Store::builder().build().await.expect("store");
    let table = touchy(&store, &source).await;

    let first = on_task(&table, |table| async move {
        table.get(&Touchy(POISON, 1)).await
    });
    until_stats(&table, "the first flight runs", |s| s.in_flight == 1).await;
    // The second miss makes the owner compare two poisoned ids: it panics.
    let second = table.get(&Touchy(POISON, 2)).await;
    assert!(matches!(second, Err(Error::Stopped)), "{second:?}");
    let first = first.await.expect("task");
    assert!(matches!(first, Err(Error::Stopped)), "{first:?}");

    until("the supervisor restarted the owner", || {
        table.stats().owner_restarts == 1
    })
    .await;
    source.release();
    assert_eq!(
        *table
            .get(&Touchy(1, 0))
            .await
            .expect("served by the new owner"),
        "value-1-2"
    );
    // The flight answered on its own task; its owner ends it a moment later.
    settled(&table).await;
}

/// Dropping every handle stops the owner for good: it is not restarted, and everything the
/// table held (its loader included) is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_table_stops_its_owner() {
    let store = Store::builder().build().await.expect("store");
    let held_by_the_loader = Arc::new(());
    let table = store
        .table::<u64, u64>("dropped")
        .loader({
            let held = Arc::clone(&held_by_the_loader);
            move |id: u64| {
                let _held = &held;
                async move { Ok::<_, std::io::Error>(id) }
            }
        })
        .build()
        .await
        .expect("table");
    let clone = table.clone();
    drop(table);
    assert_eq!(*clone.get(&9).await.expect("a clone keeps it alive"), 9);
    settled(&clone).await;
    assert_eq!(
        Arc::strong_count(&held_by_the_loader),
        2,
        "the table holds its loader"
    );
    drop(clone);
    // The owner stops, the supervisor forgets it (no restart), and the table's parts are freed.
    until("the table's parts were released", || {
        Arc::strong_count(&held_by_the_loader) == 1
    })
    .await;
}

/// Tables dropped the moment they start (often before the supervisor has read that it should
/// watch their owner) are all freed: no restart closure keeps a table's parts alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_dropped_at_once_are_freed() {
    let store = Store::builder().build().await.expect("store");
    let held_by_the_loaders = Arc::new(());
    for n in 0..50 {
        let held = Arc::clone(&held_by_the_loaders);
        let table = store
            .table::<u64, u64>(&format!("brief-{n}"))
            .loader(move |id: u64| {
                let _held = &held;
                async move { Ok::<_, std::io::Error>(id) }
            })
            .build()
            .await
            .expect("table");
        drop(table);
    }
    until("every table's parts were released", || {
        Arc::strong_count(&held_by_the_loaders) == 1
    })
    .await;
}
