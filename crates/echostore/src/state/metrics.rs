//! The metrics export: every table's counters, gauges and timings through the
//! [`metrics`](https://docs.rs/metrics/0.24) facade, to whatever recorder the process installs.
//!
//! | metric | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `echostore_<counter>_total` | counter | `table` | each [`TableStats`] counter (`l1_hits`, `source_reads`, …) |
//! | `echostore_in_flight`, `echostore_l1_len`, `echostore_connections_replaced`, `echostore_audit_max_staleness_ms` | gauge | `table` | the snapshot's gauges and its maximum |
//! | `echostore_load_seconds` | histogram | `table` | each source read (the loader), whatever its outcome |
//! | `echostore_l2_seconds` | histogram | `table` | each timed Valkey round trip of a fill |
//!
//! Counters and gauges are *read*, never pushed: the L1 hit path keeps its one per-thread increment
//! and never calls the facade. A small task per table ([`spawn_exporter`]) reads the table's
//! [`TableStats`] every [`METRICS_EXPORT_EVERY`] and sets absolute values; [`TableStats::export`]
//! does the same on demand. Histograms are observed where a load or a Valkey call ends
//! ([`Timing`], [`time_l2`]): those already cost a source read or a round trip.
//!
//! The facade records nothing until a recorder is installed (its default is a no-op), and the
//! exporter registers its handles afresh at each tick, so a recorder installed after the tables
//! started still sees them. Without the `metrics` feature every function here is a no-op and the
//! exporter is never spawned.
//!
//! Table names label the series, so two live tables with one name in one process (in two stores)
//! would publish over each other.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::state::core::TableCore;
use crate::state::stats::TableStats;
use crate::wire::key::{Key, Value};

/// How often a started table publishes its counters and gauges.
pub const METRICS_EXPORT_EVERY: Duration = Duration::from_secs(1);

/// The histogram of source reads.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const LOAD_SECONDS: &str = "echostore_load_seconds";

/// The histogram of a fill's Valkey round trips.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const L2_SECONDS: &str = "echostore_l2_seconds";

/// Registers each EchoStore metric's description and unit with the installed recorder (the
/// Prometheus `# HELP` lines, for instance). Call it once, after installing the recorder; the
/// metrics are published with or without it. Without the `metrics` feature it does nothing.
pub fn describe_metrics() {
    #[cfg(feature = "metrics")]
    on::describe();
}

/// Publishes one snapshot of `table`: counters as absolute values, gauges as set.
pub(crate) fn export(table: &Arc<str>, stats: &TableStats) {
    #[cfg(feature = "metrics")]
    on::export(table, stats);
    #[cfg(not(feature = "metrics"))]
    let _ = (table, stats);
}

/// Starts the task that publishes `core`'s counters and gauges every [`METRICS_EXPORT_EVERY`],
/// from now until the table is gone (then its gauges read zero). Holds only a weak reference: it
/// never keeps a table alive. Call it from a tokio runtime (as `Table::start` is).
#[allow(
    dead_code,
    reason = "called from the table and the fill once their hooks land"
)]
pub(crate) fn spawn_exporter<K: Key, V: Value>(core: &Arc<TableCore<K, V>>) {
    #[cfg(feature = "metrics")]
    {
        let weak = Arc::downgrade(core);
        let snapshot = move || {
            let core = weak.upgrade()?;
            Some(core.stats_now())
        };
        tokio::spawn(on::exporter(
            Arc::clone(&core.name),
            METRICS_EXPORT_EVERY,
            snapshot,
        ));
    }
    #[cfg(not(feature = "metrics"))]
    let _ = core;
}

/// Records one source read of `table` that took `took`.
#[allow(
    dead_code,
    reason = "called from the table and the fill once their hooks land"
)]
pub(crate) fn record_load(table: &Arc<str>, took: Duration) {
    #[cfg(feature = "metrics")]
    ::metrics::histogram!(LOAD_SECONDS, "table" => Arc::clone(table)).record(took);
    #[cfg(not(feature = "metrics"))]
    let _ = (table, took);
}

/// Records one Valkey round trip of `table` that took `took`.
pub(crate) fn record_l2(table: &Arc<str>, took: Duration) {
    #[cfg(feature = "metrics")]
    ::metrics::histogram!(L2_SECONDS, "table" => Arc::clone(table)).record(took);
    #[cfg(not(feature = "metrics"))]
    let _ = (table, took);
}

/// Awaits `call` (a Valkey round trip) and records how long it took in `echostore_l2_seconds`.
/// A call dropped before it ends is not recorded.
#[allow(
    dead_code,
    reason = "called from the table and the fill once their hooks land"
)]
pub(crate) async fn time_l2<T>(table: &Arc<str>, call: impl Future<Output = T>) -> T {
    #[cfg(feature = "metrics")]
    {
        let started = tokio::time::Instant::now();
        let answer = call.await;
        record_l2(table, started.elapsed());
        answer
    }
    #[cfg(not(feature = "metrics"))]
    {
        let _ = table;
        call.await
    }
}

/// A running timing, recorded when it drops: `let _timing = Timing::load(&core.name);` at the
/// start of a load covers every way out of it, early returns and timeouts included.
#[must_use = "the time is recorded when the guard drops"]
pub(crate) struct Timing<'a> {
    #[cfg(feature = "metrics")]
    table: &'a Arc<str>,
    #[cfg(feature = "metrics")]
    started: tokio::time::Instant,
    #[cfg(feature = "metrics")]
    record: fn(&Arc<str>, Duration),
    #[cfg(not(feature = "metrics"))]
    _table: std::marker::PhantomData<&'a Arc<str>>,
}

impl<'a> Timing<'a> {
    /// Times one source read of `table`, into `echostore_load_seconds`.
    #[allow(
        dead_code,
        reason = "called from the table and the fill once their hooks land"
    )]
    pub(crate) fn load(table: &'a Arc<str>) -> Self {
        Self::new(table, record_load)
    }

    /// Times one Valkey round trip of `table`, into `echostore_l2_seconds`.
    #[allow(dead_code, reason = "a guard for Valkey calls that are not one future")]
    pub(crate) fn l2(table: &'a Arc<str>) -> Self {
        Self::new(table, record_l2)
    }

    #[cfg(feature = "metrics")]
    fn new(table: &'a Arc<str>, record: fn(&Arc<str>, Duration)) -> Self {
        Timing {
            table,
            started: tokio::time::Instant::now(),
            record,
        }
    }

    #[cfg(not(feature = "metrics"))]
    fn new(_table: &'a Arc<str>, _record: fn(&Arc<str>, Duration)) -> Self {
        Timing {
            _table: std::marker::PhantomData,
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for Timing<'_> {
    fn drop(&mut self) {
        (self.record)(self.table, self.started.elapsed());
    }
}

/// The facade calls, built only with the `metrics` feature.
#[cfg(feature = "metrics")]
mod on {
    use std::sync::{Arc, LazyLock};
    use std::time::Duration;

    use ::metrics::{SharedString, Unit};
    use tokio::time::MissedTickBehavior;

    use super::{L2_SECONDS, LOAD_SECONDS};
    use crate::state::stats::{FIGURE_COUNT, Kind, TableStats};

    /// The metric name of each figure, in [`TableStats::figures`] order: made once per process,
    /// then shared (an `Arc` clone per use, no formatting on each export).
    static NAMES: LazyLock<[SharedString; FIGURE_COUNT]> = LazyLock::new(|| {
        TableStats::default().figures().map(|figure| {
            let name = match figure.kind {
                Kind::Counter => format!("echostore_{}_total", figure.name),
                Kind::Gauge => format!("echostore_{}", figure.name),
            };
            SharedString::from(Arc::<str>::from(name))
        })
    });

    pub(super) fn export(table: &Arc<str>, stats: &TableStats) {
        for (figure, name) in stats.figures().iter().zip(NAMES.iter()) {
            let table = Arc::clone(table);
            match figure.kind {
                Kind::Counter => {
                    ::metrics::counter!(name.clone(), "table" => table).absolute(figure.value);
                }
                Kind::Gauge => {
                    ::metrics::gauge!(name.clone(), "table" => table).set(figure.value as f64);
                }
            }
        }
    }

    /// Publishes `snapshot()` every `every` until it answers `None` (the table is gone), then sets
    /// the table's gauges to zero: a dropped table holds no flights and no entries.
    pub(super) async fn exporter(
        table: Arc<str>,
        every: Duration,
        snapshot: impl Fn() -> Option<TableStats>,
    ) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            // The first tick is immediate: a table's series exist from its start.
            ticks.tick().await;
            match snapshot() {
                Some(stats) => export(&table, &stats),
                None => break,
            }
        }
        let gone = TableStats::default().figures();
        for (figure, name) in gone.iter().zip(NAMES.iter()) {
            if figure.kind == Kind::Gauge {
                ::metrics::gauge!(name.clone(), "table" => Arc::clone(&table)).set(0.0);
            }
        }
    }

    pub(super) fn describe() {
        for (figure, name) in TableStats::default().figures().iter().zip(NAMES.iter()) {
            let about = figure.about.trim();
            match figure.kind {
                Kind::Counter => ::metrics::describe_counter!(name.clone(), Unit::Count, about),
                Kind::Gauge if figure.name.ends_with("_ms") => {
                    ::metrics::describe_gauge!(name.clone(), Unit::Milliseconds, about)
                }
                Kind::Gauge => ::metrics::describe_gauge!(name.clone(), Unit::Count, about),
            }
        }
        ::metrics::describe_histogram!(
            LOAD_SECONDS,
            Unit::Seconds,
            "Time of each source read (the loader), whatever its outcome."
        );
        ::metrics::describe_histogram!(
            L2_SECONDS,
            Unit::Seconds,
            "Time of each timed Valkey round trip of a fill."
        );
    }
}

impl TableStats {
    /// Publishes this snapshot through the [`metrics`](https://docs.rs/metrics/0.24) facade, to
    /// whatever recorder the process installed (none: nothing happens), under the label
    /// `table="<table>"`: each counter as the absolute value of `echostore_<counter>_total`, each
    /// gauge as `echostore_<gauge>`.
    ///
    /// A started table already does this every [`METRICS_EXPORT_EVERY`];
    /// call it to publish now (before a scrape, or as a table is shut down):
    /// `table.stats().export(table.name())`. Without the `metrics` feature it does nothing.
    pub fn export(&self, table: &str) {
        export(&std::sync::Arc::from(table), self);
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests;
