//! A herd of concurrent misses on one id becomes one source read, in-process and over Valkey.

mod common;

use std::sync::Arc;

use common::{BACKENDS, Source, until_stats};
use echostore::{Origin, Store, Table};
use tokio::sync::Barrier;

const HERD: usize = 1000;

/// Fires `HERD` gets of one id at once (behind a barrier) and waits until all of them have
/// joined the flight before the source answers; returns every caller's answer.
async fn herd(
    table: &Table<u64, String>,
    source: &Source,
    id: u64,
) -> Vec<echostore::Fetched<String>> {
    // Read before any caller exists: once spawned, callers join on the worker threads at once.
    let before = table.stats().coalesced;
    let barrier = Arc::new(Barrier::new(HERD));
    let callers: Vec<_> = (0..HERD)
        .map(|_| {
            let table = table.clone();
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                table.fetch(&id).await
            })
        })
        .collect();
    until_stats(
        "every caller joined the flight",
        || table.stats(),
        |s| s.coalesced - before == (HERD - 1) as u64,
    )
    .await;
    source.release();
    let mut answers = Vec::with_capacity(HERD);
    for caller in callers {
        answers.push(caller.await.expect("caller task").expect("answer"));
    }
    answers
}

/// 1,000 concurrent misses: one loader call, 999 coalesced, one shared `Arc`, then an L1 hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_misses_read_the_source_once() {
    for backend in BACKENDS {
        let source = Source::gated();
        let store = Store::builder().build().await.expect("store");
        let table = store
            .table::<u64, String>("herd")
            .l1_backend(backend)
            .loader(source.loader())
            .start()
            .await
            .expect("table");

        let answers = herd(&table, &source, 7).await;

        assert_eq!(
            source.calls(),
            1,
            "{backend:?}: the loader ran exactly once"
        );
        let first = &answers[0].value;
        assert!(
            answers.iter().all(|a| Arc::ptr_eq(&a.value, first)),
            "{backend:?}: every caller holds the same Arc"
        );
        let led = answers
            .iter()
            .filter(|a| a.origin == Origin::Loaded)
            .count();
        let joined = answers
            .iter()
            .filter(|a| a.origin == Origin::Coalesced)
            .count();
        assert_eq!(
            (led, joined),
            (1, HERD - 1),
            "{backend:?}: one leader, the rest joined"
        );
        let stats = table.stats();
        assert_eq!(stats.source_reads, 1);
        assert_eq!(stats.coalesced, (HERD - 1) as u64);
        assert_eq!(stats.in_flight, 0, "{backend:?}: the flight is gone");

        let again = table.fetch(&7).await.expect("hit");
        assert_eq!(
            again.origin,
            Origin::L1,
            "{backend:?}: the next get is an L1 hit"
        );
        assert!(Arc::ptr_eq(&again.value, first));
        assert_eq!(table.stats().l1_hits, 1);
        assert_eq!(source.calls(), 1);
    }
}

/// Different ids do not coalesce: each gets its own flight and its own source read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_ids_each_read_once() {
    let source = Source::open();
    let store = Store::builder().build().await.expect("store");
    let table = store
        .table::<u64, String>("ids")
        .loader(source.loader())
        .start()
        .await
        .expect("table");
    let gets = (0..50u64).flat_map(|id| {
        let table = table.clone();
        (0..4).map(move |_| {
            let table = table.clone();
            tokio::spawn(async move { table.get(&id).await })
        })
    });
    for get in futures::future::join_all(gets).await {
        get.expect("task").expect("value");
    }
    // Each id was read once: its four callers either joined its flight or hit L1 after it.
    assert_eq!(source.calls(), 50);
    let stats = table.stats();
    assert_eq!(stats.source_reads, 50);
    assert_eq!(stats.coalesced + stats.l1_hits, 150);
}
