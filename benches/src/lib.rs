//! Shared helpers for the EchoStore benches: sizes that shrink under CI, and tables filled for a
//! bench to read.

use std::time::Duration;

use echostore::{L1Backend, Store, Table};

/// `true` when the `CI` environment variable is set: benches then run smaller and shorter.
pub fn under_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// `full` normally, `ci` under CI.
pub fn size(full: usize, ci: usize) -> usize {
    if under_ci() { ci } else { full }
}

/// Criterion's measurement time: shorter under CI.
pub fn measurement_time() -> Duration {
    if under_ci() {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(3)
    }
}

/// A multi-thread runtime with two workers, like the machine the figures are recorded on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A table of `keys` small values on `backend`, every key already in L1 (ttl one hour).
pub async fn filled_table(store: &Store, backend: L1Backend, keys: u64) -> Table<u64, u64> {
    let table = store
        .table::<u64, u64>(&format!("bench-{backend:?}-{keys}").to_lowercase())
        .ttl(Duration::from_secs(3600))
        .l1_backend(backend)
        .l1_capacity(keys as usize * 2)
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(id.wrapping_mul(31)) })
        .start()
        .await
        .expect("bench table");
    for id in 0..keys {
        table.get(&id).await.expect("fill");
    }
    table
}

/// `n` ids drawn uniformly from `0..keys`, in a fixed order for the whole bench.
pub fn random_ids(keys: u64, n: usize) -> Vec<u64> {
    (0..n).map(|_| rand::random_range(0..keys)).collect()
}

/// The per-iteration times of one bench function, one figure per call of its `iter_custom`
/// routine, kept so that a bench can print the ratio of two figures measured in the same run.
///
/// Criterion calls the routine a few times to warm up, then once per sample: the last
/// `sample_size` figures are the samples its own report is made of.
#[derive(Debug, Default)]
pub struct Samples(std::sync::Mutex<Vec<f64>>);

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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(per_iter);
        elapsed
    }

    /// The last `samples` figures summarised; `None` if the function did not run (filtered out).
    pub fn summary(&self, samples: usize) -> Option<Summary> {
        let all = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut last = all[all.len().saturating_sub(samples)..].to_vec();
        if last.is_empty() {
            return None;
        }
        last.sort_by(f64::total_cmp);
        Some(Summary {
            median_ns: last[last.len() / 2],
            min_ns: last[0],
            max_ns: last[last.len() - 1],
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
