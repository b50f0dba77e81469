//! How the tools measure: latency distributions in an HDR histogram ([`Latencies`]), the one
//! quantile helper for a handful of figures ([`quantile`], [`median`]), an L1 hit polled once
//! ([`l1_hit`]), timed `GET` round trips ([`timed_gets`]), criterion samples kept for in-run
//! ratios ([`Samples`]), and the peak RSS ([`peak_rss_kib`]).

use std::hint::black_box;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use echostore::{Key, Table, Value};
use futures::FutureExt;
use hdrhistogram::Histogram;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

use crate::BoxError;

/// A latency distribution: nanoseconds in an auto-resizing HDR histogram, three significant
/// figures, so a million samples cost no more memory than ten.
#[derive(Debug, Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Latencies(Histogram::new(3).expect("three significant figures are valid"))
    }
}

impl Latencies {
    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        // `record` grows the histogram to fit; `saturating_record` would clamp to its current top.
        if self.0.record(ns).is_err() {
            self.0.saturating_record(ns);
        }
    }

    /// Latencies recorded.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// `true` when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `q` quantile (0.5 is the median); zero when empty. The histogram keeps a range of
    /// equivalent values per recorded one; the middle of that range is the unbiased estimate.
    pub fn quantile(&self, q: f64) -> Duration {
        self.nanos(self.0.value_at_quantile(q))
    }

    /// The slowest; zero when empty.
    pub fn max(&self) -> Duration {
        self.nanos(self.0.max())
    }

    fn nanos(&self, value: u64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.0.median_equivalent(value))
    }
}

/// The `q` quantile of a handful of figures (nearest rank, in any order); 0 for none.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or(0.0)
}

/// The median of a handful of figures; 0 for none.
pub fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5)
}

/// One `get` of `id` polled once: an L1 hit completes without awaiting, so anything else (a miss,
/// an error) is an error here. Timing this times the hit path, not an executor.
pub fn l1_hit<K: Key, V: Value>(table: &Table<K, V>, id: &K) -> Result<Arc<V>, BoxError> {
    match table.get(id).now_or_never() {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(format!("get {id:?} failed: {e}").into()),
        None => Err(format!(
            "get {id:?} was not an L1 hit (it had to wait): the timed loop needs every key in L1"
        )
        .into()),
    }
}

/// `n` sequential `GET`s of `key`, one round trip at a time as one caller sees them, each timed
/// into `trips`; every answer must be `expected`.
pub async fn timed_gets(
    conn: &mut MultiplexedConnection,
    key: &str,
    expected: &[u8],
    n: u64,
    trips: &mut Latencies,
) -> Result<(), BoxError> {
    for _ in 0..n {
        let started = Instant::now();
        let got: Option<Vec<u8>> = conn.get(key).await?;
        trips.record(started.elapsed());
        if got.as_deref() != Some(expected) {
            return Err(format!("GET {key} returned {got:?}, not the value SET").into());
        }
        black_box(got);
    }
    Ok(())
}

/// Peak resident set size of this process in KiB (`VmHWM`), if `/proc` says.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The per-iteration times of one bench function, one figure per call of its `iter_custom`
/// routine, kept so that a bench can print the ratio of two figures measured in the same run.
///
/// Criterion calls the routine a few times to warm up, then once per sample: the last
/// `sample_size` figures are the samples its own report is made of.
#[derive(Debug, Default)]
pub struct Samples(Mutex<Vec<f64>>);

/// Median and range, in nanoseconds per iteration, of a bench function's samples.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// The median sample.
    pub median_ns: f64,
    /// The fastest sample.
    pub min_ns: f64,
    /// The slowest sample.
    pub max_ns: f64,
}

impl Samples {
    /// Records one call of the routine (`elapsed` over `iters` iterations) and returns `elapsed`.
    pub fn record(&self, elapsed: Duration, iters: u64) -> Duration {
        let per_iter = elapsed.as_nanos() as f64 / iters.max(1) as f64;
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(per_iter);
        elapsed
    }

    /// The last `samples` figures summarised; `None` if the function did not run (filtered out).
    pub fn summary(&self, samples: usize) -> Option<Summary> {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let last = &all[all.len().saturating_sub(samples)..];
        if last.is_empty() {
            return None;
        }
        Some(Summary {
            median_ns: median(last),
            min_ns: quantile(last, 0.0),
            max_ns: quantile(last, 1.0),
        })
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "median {} (samples {} .. {})",
            human(self.median_ns),
            human(self.min_ns),
            human(self.max_ns)
        )
    }
}

/// Nanoseconds as a person would write them: `87.3 ns`, `31.2 µs`, `24.8 ms`.
pub fn human(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

/// Prints `name: <summary>`, if that function ran.
pub fn print_summary(name: &str, summary: Option<Summary>) {
    if let Some(s) = summary {
        println!("  {name}: {s}");
    }
}

/// Prints `what: a / b = <ratio>×` from the two medians, if both functions ran.
pub fn print_ratio(what: &str, a: (&str, Option<Summary>), b: (&str, Option<Summary>)) {
    if let (Some(x), Some(y)) = (a.1, b.1) {
        println!(
            "  {what}: {} / {} = {:.2}×",
            a.0,
            b.0,
            x.median_ns / y.median_ns
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nearest rank: the median of an odd count is its middle figure, whatever the order.
    #[test]
    fn quantile_is_nearest_rank() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(quantile(&[4.0, 1.0, 3.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&[4.0, 1.0, 3.0, 2.0], 1.0), 4.0);
        assert_eq!(quantile(&[4.0, 1.0, 3.0, 2.0], 0.0), 1.0);
        assert_eq!(median(&[]), 0.0);
    }

    /// The histogram's quantiles land within its three significant figures.
    #[test]
    fn latencies_keep_three_figures() {
        let mut l = Latencies::default();
        for us in [1000, 2000, 3000] {
            l.record(Duration::from_micros(us));
        }
        assert_eq!(l.len(), 3);
        let p50 = l.quantile(0.5).as_secs_f64() * 1e6;
        assert!((p50 - 2000.0).abs() <= 1.0, "{p50}");
        let max = l.max().as_secs_f64() * 1e6;
        assert!((max - 3000.0).abs() <= 1.5, "{max}");
        assert_eq!(Latencies::default().quantile(0.5), Duration::ZERO);
    }
}
