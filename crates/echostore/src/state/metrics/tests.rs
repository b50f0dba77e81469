//! Unit tests of `metrics`.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};

use ::metrics::Unit;

use super::*;

/// `(kind, name, table label) → value` of everything recorded since the last snapshot.
fn read(snapshotter: &Snapshotter) -> HashMap<(MetricKind, String, String), DebugValue> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (named(&key), value))
        .collect()
}

fn named(key: &CompositeKey) -> (MetricKind, String, String) {
    let table = key
        .key()
        .labels()
        .find(|l| l.key() == "table")
        .map(|l| l.value().to_owned())
        .unwrap_or_default();
    (key.kind(), key.key().name().to_owned(), table)
}

fn counter(name: &str, table: &str) -> (MetricKind, String, String) {
    (MetricKind::Counter, name.to_owned(), table.to_owned())
}

fn gauge(name: &str, table: &str) -> (MetricKind, String, String) {
    (MetricKind::Gauge, name.to_owned(), table.to_owned())
}

/// Each figure of a snapshot lands under its own name: counters `_total`, gauges bare.
#[test]
fn export_names_every_figure_once() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let stats = TableStats {
        source_reads: 7,
        l1_hits: 40,
        in_flight: 2,
        l1_len: 5,
        ..TableStats::default()
    };
    ::metrics::with_local_recorder(&recorder, || export(&Arc::from("users"), &stats));
    let seen = read(&snapshotter);
    assert_eq!(seen.len(), stats.counters().len(), "one series per figure");
    assert_eq!(
        seen[&counter("echostore_source_reads_total", "users")],
        DebugValue::Counter(7)
    );
    assert_eq!(
        seen[&counter("echostore_l1_hits_total", "users")],
        DebugValue::Counter(40)
    );
    assert_eq!(
        seen[&counter("echostore_errors_total", "users")],
        DebugValue::Counter(0)
    );
    assert_eq!(
        seen[&gauge("echostore_in_flight", "users")],
        DebugValue::Gauge(2.0.into())
    );
    assert_eq!(
        seen[&gauge("echostore_l1_len", "users")],
        DebugValue::Gauge(5.0.into())
    );
}

/// Load and Valkey timings are histograms in seconds, labelled with the table.
#[test]
fn timings_are_histograms_in_seconds() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let table: Arc<str> = Arc::from("orders");
    ::metrics::with_local_recorder(&recorder, || {
        record_load(&table, Duration::from_millis(250));
        record_l2(&table, Duration::from_micros(500));
        drop(Timing::l2(&table));
    });
    let seen = read(&snapshotter);
    let key = |name: &str| (MetricKind::Histogram, name.to_owned(), "orders".to_owned());
    assert_eq!(
        seen[&key("echostore_load_seconds")],
        DebugValue::Histogram(vec![0.25.into()])
    );
    let DebugValue::Histogram(l2) = &seen[&key("echostore_l2_seconds")] else {
        panic!("l2 is a histogram");
    };
    assert_eq!(l2.len(), 2, "record_l2 and the dropped Timing");
    assert_eq!(l2[0].into_inner(), 0.0005);
}

/// Descriptions carry each field's doc text and the histograms' unit.
#[test]
fn describe_uses_the_field_docs() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    ::metrics::with_local_recorder(&recorder, || {
        describe_metrics();
        export(&Arc::from("t"), &TableStats::default());
        record_load(&Arc::from("t"), Duration::ZERO);
    });
    let described: HashMap<_, _> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, unit, about, _)| (key.key().name().to_owned(), (unit, about)))
        .collect();
    let (unit, about) = &described["echostore_source_reads_total"];
    assert_eq!(*unit, Some(Unit::Count));
    assert_eq!(
        about.as_deref(),
        Some(
            "Ids read from the source of truth: one per loader call, one per id of a batch loader call."
        )
    );
    assert_eq!(described["echostore_load_seconds"].0, Some(Unit::Seconds));
}

/// The exporter publishes what the table holds at each tick, stops when the table is gone,
/// and leaves its gauges at zero.
#[tokio::test]
async fn exporter_follows_the_table_until_it_is_gone() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = ::metrics::set_default_local_recorder(&recorder);
    let reads = Arc::new(AtomicU64::new(3));
    let live = Arc::clone(&reads);
    let snapshot = move || {
        let reads = live.load(Ordering::SeqCst);
        (reads != u64::MAX).then_some(TableStats {
            source_reads: reads,
            in_flight: 1,
            ..TableStats::default()
        })
    };
    // A current-thread runtime: the exporter runs on this thread, under the local recorder.
    let task = tokio::spawn(on::exporter(
        Arc::from("t"),
        Duration::from_millis(5),
        snapshot,
    ));
    let source_reads = counter("echostore_source_reads_total", "t");
    let in_flight = gauge("echostore_in_flight", "t");
    let mut seen = HashMap::new();
    for expected in [3, 9] {
        reads.store(expected, Ordering::SeqCst);
        // The snapshot drains the recorder; the next tick publishes the table's value again.
        for _ in 0..400 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            seen = read(&snapshotter);
            if seen.get(&source_reads) == Some(&DebugValue::Counter(expected)) {
                break;
            }
        }
        assert_eq!(seen[&source_reads], DebugValue::Counter(expected));
        assert_eq!(seen[&in_flight], DebugValue::Gauge(1.0.into()));
    }
    // Let a tick publish `in_flight = 1` again, unread, before the table goes.
    tokio::time::sleep(Duration::from_millis(30)).await;
    reads.store(u64::MAX, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the exporter stops once the table is gone")
        .expect("the exporter does not panic");
    assert_eq!(
        read(&snapshotter)[&in_flight],
        DebugValue::Gauge(0.0.into())
    );
}
