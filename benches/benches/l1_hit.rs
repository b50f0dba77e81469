//! What an L1 hit through `Table::get` costs, for both backends, over 100k random keys and one
//! hot key, on one thread and on two.
//!
//! An L1 hit completes without awaiting, so each get is polled once with `now_or_never` and the
//! bench times the hit path itself, not an executor.
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use echostore::{L1Backend, Store, Table};
use echostore_benches::{filled_table, measurement_time, random_ids, runtime, size};
use futures::FutureExt;

fn hit(table: &Table<u64, u64>, id: &u64) -> u64 {
    *table
        .get(id)
        .now_or_never()
        .expect("an L1 hit completes without waiting")
        .expect("a value")
}

/// Times `iters` hits spread over `threads` threads, each walking `ids` from its own offset.
fn timed(table: &Table<u64, u64>, ids: &[u64], threads: usize, iters: u64) -> Duration {
    let per_thread = iters / threads as u64;
    let barrier = std::sync::Barrier::new(threads);
    let elapsed = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let mut at = t * ids.len() / threads;
                    for _ in 0..per_thread {
                        black_box(hit(table, &ids[at]));
                        at = if at + 1 == ids.len() { 0 } else { at + 1 };
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .max()
            .unwrap_or_default()
    });
    // Wall time per hit across all threads: the throughput view.
    elapsed / threads as u32
}

fn l1_hit(c: &mut Criterion) {
    let rt = runtime();
    let keys = size(100_000, 10_000) as u64;
    let ids = random_ids(keys, size(1 << 20, 1 << 16));
    let store = rt.block_on(Store::builder().build()).expect("store");
    let mut group = c.benchmark_group("an L1 hit through Table::get");
    group.measurement_time(measurement_time());
    group.throughput(Throughput::Elements(1));
    for backend in [L1Backend::QuickCache, L1Backend::Moka] {
        let table = rt.block_on(filled_table(&store, backend, keys));
        for threads in [1, 2] {
            let id = BenchmarkId::new(
                format!("{backend:?} over {keys} random keys"),
                format!("{threads} thread(s)"),
            );
            group.bench_function(id, |b| {
                b.iter_custom(|iters| timed(&table, &ids, threads, iters))
            });
        }
        let hot = [7u64];
        for threads in [1, 2] {
            let id = BenchmarkId::new(
                format!("{backend:?} on one hot key"),
                format!("{threads} thread(s)"),
            );
            group.bench_function(id, |b| {
                b.iter_custom(|iters| timed(&table, &hot, threads, iters))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = l1_hit
}
criterion_main!(benches);
