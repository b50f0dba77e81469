//! The metrics export publishes exactly what `Table::stats` reads, under
//! `echostore_<counter>_total{table}` and `echostore_<gauge>{table}`, to an installed recorder.
//!
//! Each test runs on a current-thread runtime under its own thread-local `DebuggingRecorder`, so
//! the table's owner, its flights and the export all record into that test's recorder alone.
#![cfg(feature = "metrics")]

use std::collections::HashMap;
use std::time::Duration;

use echostore::{Store, Table, TableStats};
use echostore_testkit::Source;
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// `(kind, name, table label) → value`, drained from the recorder.
type Seen = HashMap<(MetricKind, String, String), DebugValue>;

fn read(snapshotter: &Snapshotter) -> Seen {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let table = key
                .key()
                .labels()
                .find(|l| l.key() == "table")
                .map(|l| l.value().to_owned())
                .unwrap_or_default();
            ((key.kind(), key.key().name().to_owned(), table), value)
        })
        .collect()
}

/// The key of one series in [`Seen`].
fn series(kind: MetricKind, name: &str, table: &str) -> (MetricKind, String, String) {
    (kind, name.to_owned(), table.to_owned())
}

/// Every figure of `stats` as the recorder should hold it for `table`.
fn expected(stats: &TableStats, table: &str) -> Seen {
    stats
        .counters()
        .into_iter()
        .map(|(name, value)| {
            let gauge = [
                "in_flight",
                "l1_len",
                "connections_replaced",
                "audit_max_staleness_ms",
            ];
            if gauge.contains(&name) {
                let key = series(MetricKind::Gauge, &format!("echostore_{name}"), table);
                (key, DebugValue::Gauge((value as f64).into()))
            } else {
                let key = series(
                    MetricKind::Counter,
                    &format!("echostore_{name}_total"),
                    table,
                );
                (key, DebugValue::Counter(value))
            }
        })
        .collect()
}

/// A `u64 -> u64` table on `store` whose loader reads `source` (20 ms a read) and answers the
/// id's square.
async fn squares(store: &Store, name: &str, source: &Source) -> Table<u64, u64> {
    let source = source.clone();
    store
        .table::<u64, u64>(name)
        .loader(move |id: u64| {
            let source = source.clone();
            async move {
                source.read().await;
                Ok::<_, std::io::Error>(id * id)
            }
        })
        .build()
        .await
        .expect("table")
}

/// Misses, a coalesced herd and hits on a local table: every exported series equals its field
/// of `stats()`, `source_reads` included.
#[tokio::test]
async fn exported_counters_equal_the_stats_snapshot() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let source = Source::taking(Duration::from_millis(20));
    let store = Store::builder().build().await.expect("store");
    let table = squares(&store, "metrics_local", &source).await;

    let herd: Vec<_> = (0..10)
        .map(|_| {
            let table = table.clone();
            tokio::spawn(async move { table.get(&3).await })
        })
        .collect();
    for answer in futures::future::join_all(herd).await {
        assert_eq!(*answer.expect("task").expect("get"), 9);
    }
    for id in 0..3 {
        table.get(&id).await.expect("miss");
        table.get(&id).await.expect("hit");
    }

    let stats = table.stats();
    stats.export(table.name());
    let seen = read(&snapshotter);

    assert_eq!(stats.source_reads, source.calls() as u64);
    assert!(stats.source_reads > 0 && stats.coalesced > 0 && stats.l1_hits > 0);
    let source_reads = series(
        MetricKind::Counter,
        "echostore_source_reads_total",
        "metrics_local",
    );
    assert_eq!(seen[&source_reads], DebugValue::Counter(stats.source_reads));
    for (key, value) in expected(&stats, "metrics_local") {
        assert_eq!(seen.get(&key), Some(&value), "{key:?}");
    }
}

/// On a real Valkey, a second store's table answers from L2 and its export says so: the
/// `l2_hits` and `source_reads` series follow `stats()` there too.
#[tokio::test]
async fn an_l2_hit_is_exported_as_counted() {
    let valkey = embedded_valkey::EmbeddedValkey::start().expect("a real valkey-server");
    let source = Source::taking(Duration::from_millis(20));
    let (first, second) = (DebuggingRecorder::new(), DebuggingRecorder::new());
    let (of_first, of_second) = (first.snapshotter(), second.snapshotter());
    let mut tables = Vec::new();
    for _ in 0..2 {
        let store = Store::builder()
            .valkey(valkey.url())
            .require_valkey(true)
            .build()
            .await
            .expect("store on valkey");
        tables.push(squares(&store, "metrics_l2", &source).await);
    }
    assert_eq!(*tables[0].get(&4).await.expect("load"), 16);
    assert_eq!(*tables[1].get(&4).await.expect("l2 hit"), 16);

    // Two processes would each have their own recorder: stand each table's in.
    let (loaded, hit) = (tables[0].stats(), tables[1].stats());
    metrics::with_local_recorder(&first, || loaded.export("metrics_l2"));
    metrics::with_local_recorder(&second, || hit.export("metrics_l2"));

    assert_eq!((loaded.source_reads, hit.l2_hits), (1, 1));
    for (stats, snapshotter) in [(loaded, &of_first), (hit, &of_second)] {
        let seen = read(snapshotter);
        for (key, value) in expected(&stats, "metrics_l2") {
            assert_eq!(seen.get(&key), Some(&value), "{key:?}");
        }
    }
}

/// A started table publishes on its own, without `export` being called, and times its loads.
#[tokio::test]
#[ignore = "needs the exporter hook in Table::start and the timing hook in the load"]
async fn a_started_table_publishes_without_being_asked() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let source = Source::taking(Duration::from_millis(20));
    let store = Store::builder().build().await.expect("store");
    let table = squares(&store, "metrics_periodic", &source).await;
    table.get(&5).await.expect("miss");

    let source_reads = series(
        MetricKind::Counter,
        "echostore_source_reads_total",
        "metrics_periodic",
    );
    let mut seen = read(&snapshotter);
    let load_seconds = series(
        MetricKind::Histogram,
        "echostore_load_seconds",
        "metrics_periodic",
    );
    let Some(DebugValue::Histogram(loads)) = seen.get(&load_seconds) else {
        panic!("the load was timed: {seen:?}");
    };
    assert_eq!(loads.len(), 1, "one load, one observation");
    assert!(loads[0].into_inner() >= 0.02, "the loader sleeps 20 ms");

    let deadline = tokio::time::Instant::now() + echostore::METRICS_EXPORT_EVERY * 3;
    loop {
        // A snapshot drains the recorder; the exporter's next tick sets the value again.
        if seen.get(&source_reads) == Some(&DebugValue::Counter(1)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no export within three periods"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = read(&snapshotter);
    }
}

/// A fill on a real Valkey times its read of the value key, miss or hit.
#[tokio::test]
#[ignore = "needs the timing hook on the fill's Valkey read"]
async fn a_fill_times_its_valkey_read() {
    let valkey = embedded_valkey::EmbeddedValkey::start().expect("a real valkey-server");
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let source = Source::taking(Duration::from_millis(20));
    let store = Store::builder()
        .valkey(valkey.url())
        .require_valkey(true)
        .build()
        .await
        .expect("store on valkey");
    let table = squares(&store, "metrics_l2_timing", &source).await;
    table.get(&6).await.expect("miss, then a load");

    let l2_seconds = series(
        MetricKind::Histogram,
        "echostore_l2_seconds",
        "metrics_l2_timing",
    );
    let seen = read(&snapshotter);
    let Some(DebugValue::Histogram(reads)) = seen.get(&l2_seconds) else {
        panic!("the fill's Valkey read was timed: {seen:?}");
    };
    assert!(!reads.is_empty());
    assert!(reads.iter().all(|s| (0.0..1.0).contains(&s.into_inner())));
}
