//! What an L1 hit through `Table::get` costs, for both backends, over 100k random keys and one
//! hot key, on one thread and on two; and, as the in-run baseline, a bare quick_cache lookup of an
//! `Arc` over the same keys (the floor the table's hit stands on).
//!
//! An L1 hit completes without awaiting, so each get is polled once with `now_or_never` and the
//! bench times the hit path itself, not an executor.
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use echostore::{L1Backend, Store, Table};
use echostore_testkit::measure;
use echostore_testkit::{
    Samples, filled_table, measurement_time, print_ratio, print_summary, random_ids, runtime, size,
};

const SAMPLE_SIZE: usize = 100;

fn hit(table: &Table<u64, u64>, id: &u64) -> u64 {
    *measure::l1_hit(table, id).unwrap_or_else(|e| panic!("{e}"))
}

/// Times `iters` calls of `hit` spread over `threads` threads, each walking `ids` from its own
/// offset.
///
/// The figure is wall time: from the first thread's start to the last thread's end, so that two
/// threads which could not run at the same moment (another process had the other core) show it.
fn timed(hit: &(impl Fn(&u64) -> u64 + Sync), ids: &[u64], threads: usize, iters: u64) -> Duration {
    let per_thread = iters.div_ceil(threads as u64);
    let barrier = std::sync::Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let mut at = t * ids.len() / threads;
                    for _ in 0..per_thread {
                        black_box(hit(&ids[at]));
                        at = if at + 1 == ids.len() { 0 } else { at + 1 };
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let first = spans.iter().map(|s| s.0).min().expect("a thread");
    let last = spans.iter().map(|s| s.1).max().expect("a thread");
    // The throughput view: the wall time of all threads' hits together, scaled to `iters` of
    // them (criterion divides by `iters`). An earlier version took the slowest thread's own time
    // and divided it by `threads`: that halved the two-thread figure, and halved it once more
    // when the threads ran one after the other instead of together.
    let hits = per_thread * threads as u64;
    (last - first).mul_f64(iters as f64 / hits as f64)
}

fn l1_hit(c: &mut Criterion) {
    let rt = runtime();
    let keys = size(100_000, 10_000) as u64;
    let ids = random_ids(keys, size(1 << 20, 1 << 16));
    let store = rt.block_on(Store::builder().build()).expect("store");
    // Each function's samples, kept to print moka against quick_cache from this same run.
    let mut recorded: Vec<(String, Samples)> = Vec::new();
    let mut group = c.benchmark_group("an L1 hit through Table::get");
    group.measurement_time(measurement_time());
    group.sample_size(SAMPLE_SIZE);
    group.throughput(Throughput::Elements(1));

    // The baseline: quick_cache itself, `u64 -> Arc<u64>`, the same capacity and keys.
    let bare = quick_cache::sync::Cache::<u64, Arc<u64>>::new(keys as usize * 2);
    for id in 0..keys {
        bare.insert(id, Arc::new(id.wrapping_mul(31)));
    }
    let bare_hit = |id: &u64| *bare.get(id).expect("every key is in the cache");
    let samples = Samples::default();
    group.bench_function(
        BenchmarkId::new(
            format!("bare quick_cache over {keys} random keys"),
            "1 thread(s)",
        ),
        |b| b.iter_custom(|iters| samples.record(timed(&bare_hit, &ids, 1, iters), iters)),
    );
    let baseline = samples;

    for backend in [L1Backend::QuickCache, L1Backend::Moka] {
        let all: Vec<u64> = (0..keys).collect();
        let name = format!("bench-{backend:?}").to_lowercase();
        let table = rt
            .block_on(filled_table(&store, &name, backend, &all, |id| {
                id.wrapping_mul(31)
            }))
            .expect("a filled table");
        let hot = [7u64];
        let over = format!("over {keys} random keys");
        for (read, over, label) in [
            (&ids[..], over.as_str(), "random keys"),
            (&hot[..], "on one hot key", "one hot key"),
        ] {
            for threads in [1, 2] {
                let id = BenchmarkId::new(
                    format!("{backend:?} {over}"),
                    format!("{threads} thread(s)"),
                );
                let samples = Samples::default();
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        samples.record(timed(&|id| hit(&table, id), read, threads, iters), iters)
                    })
                });
                let name = format!("{backend:?}, {label}, {threads} thread(s)");
                recorded.push((name, samples));
            }
        }
    }
    group.finish();

    println!("\nthe L1 hit, this run (wall time per hit, over all threads' hits):");
    let bare = baseline.summary(SAMPLE_SIZE);
    print_summary(
        "bare quick_cache, Arc values, random keys, 1 thread(s)",
        bare,
    );
    let summaries: Vec<_> = recorded
        .iter()
        .map(|(name, samples)| (name.as_str(), samples.summary(SAMPLE_SIZE)))
        .collect();
    for (name, summary) in &summaries {
        print_summary(name, *summary);
    }
    // The first half is quick_cache, the second moka, in the same order.
    let half = summaries.len() / 2;
    for (q, m) in summaries[..half].iter().zip(&summaries[half..]) {
        print_ratio("moka against quick_cache", *m, *q);
    }
    print_ratio(
        "the table over bare quick_cache",
        summaries[0],
        ("bare quick_cache, random keys, 1 thread(s)", bare),
    );
}

criterion_group!(benches, l1_hit);
criterion_main!(benches);
