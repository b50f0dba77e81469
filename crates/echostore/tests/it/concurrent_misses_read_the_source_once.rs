//! A herd of concurrent misses on one id becomes one source read, in-process and over Valkey.

use crate::common;

use std::sync::Arc;

use common::{BACKENDS, Source, answers, herd, local_table, settled, until_stats};
use echostore::{Origin, Table};

const HERD: usize = 1000;

/// Fires `HERD` gets of one id at once and waits until all of them have joined the flight before
/// the source answers; returns every caller's answer.
async fn herd_of_misses(
    table: &Table<u64, String>,
    source: &Source,
    id: u64,
) -> Vec<echostore::Fetched<String>> {
    // Read before any caller exists: once spawned, callers join on the worker threads at once.
    let before = table.stats().coalesced;
    let callers = herd(table, HERD, id);
    until_stats(table, "every caller joined the flight", |s| {
        s.coalesced - before == (HERD - 1) as u64
    })
    .await;
    source.release();
    answers(callers)
        .await
        .into_iter()
        .map(|a| a.expect("answer"))
        .collect()
}

/// 1,000 concurrent misses: one loader call, 999 coalesced, one shared `Arc`, then an L1 hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_misses_read_the_source_once() {
    for backend in BACKENDS {
        let source = Source::gated();
        let table = local_table("herd", &source, |t| t.l1_backend(backend)).await;

        let answers = herd_of_misses(&table, &source, 7).await;

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
        settled(&table).await; // the flight answered on its own task; its owner ends it

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
    let table = local_table("ids", &source, |t| t).await;
    let callers = (0..50u64).flat_map(|id| herd(&table, 4, id));
    for answer in answers(callers.collect()).await {
        answer.expect("value");
    }
    // Each id was read once: its four callers either joined its flight or hit L1 after it.
    assert_eq!(source.calls(), 50);
    let stats = table.stats();
    assert_eq!(stats.source_reads, 50);
    assert_eq!(stats.coalesced + stats.l1_hits, 150);
    settled(&table).await;
}
