//! What a batch read costs against its baselines, in one run against a live embedded Valkey:
//!
//! - `get_many` of 100 ids all on Valkey (none in L1) against one raw `MGET` of the same 100
//!   value keys over a redis-rs multiplexed connection: the target is at most 1.3×;
//! - `get_many` of 100 ids all in L1 against 100 `get`s that hit L1: the target is at most 1.2×.
//!
//! `docs/benchmarks.md` has the figures and the command.
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use echostore::{Key, L1Backend, Store};
use echostore_testkit::fixtures::l2_only_table;
use echostore_testkit::measure::l1_hit;
use echostore_testkit::{
    Samples, filled_table, measurement_time, print_ratio, print_summary, runtime, size,
};
use embedded_valkey::EmbeddedValkey;

const SAMPLE_SIZE: usize = 50;
const BATCH: u64 = 100;

fn batch(c: &mut Criterion) {
    let rt = runtime();
    let valkey = EmbeddedValkey::start().expect("an embedded valkey-server");
    let url = valkey.url();
    // Windows of 100 ids over many keys: the L2-only table's one-entry L1 never holds a window's id.
    let keys = size(20_000, 2_000) as u64;
    let windows = keys / BATCH;
    let loads = Arc::new(AtomicU64::new(0));
    let l2_table = rt
        .block_on(l2_only_table(&url, "bench-batch", keys, Arc::clone(&loads)))
        .expect("an L2-only table");
    let mut conn = rt.block_on(async {
        redis::Client::open(url.as_str())
            .expect("valkey url")
            .get_multiplexed_async_connection()
            .await
            .expect("a multiplexed connection")
    });
    let value_keys: Vec<Vec<u8>> = (0..keys)
        .map(|id| {
            echostore::protocol::key_names(None, "bench-batch", &id.render())
                .expect("key names")
                .value
        })
        .collect();

    let store = rt.block_on(Store::builder().build()).expect("store");
    let l1_ids: Vec<u64> = (0..BATCH).collect();
    let l1_table = rt
        .block_on(filled_table(
            &store,
            "bench-batch-l1",
            L1Backend::QuickCache,
            &l1_ids,
            |id| id.wrapping_mul(31),
        ))
        .expect("a filled table");

    let (mget, many_l2, hits, many_l1) = (
        Samples::default(),
        Samples::default(),
        Samples::default(),
        Samples::default(),
    );
    let mut group = c.benchmark_group("a batch of 100 ids");
    group.measurement_time(measurement_time());
    group.sample_size(SAMPLE_SIZE);
    group.throughput(Throughput::Elements(BATCH));

    let mut window = 0u64;
    group.bench_function("a raw MGET of 100 value keys", |b| {
        b.iter_custom(|iters| {
            let elapsed = rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let from = (window * BATCH) as usize;
                    let mut cmd = redis::cmd("MGET");
                    for key in &value_keys[from..from + BATCH as usize] {
                        cmd.arg(key);
                    }
                    let values: Vec<Option<Vec<u8>>> =
                        cmd.query_async(&mut conn).await.expect("MGET");
                    assert!(values.iter().all(Option::is_some));
                    black_box(values);
                    window = (window + 1) % windows;
                }
                start.elapsed()
            });
            mget.record(elapsed, iters)
        })
    });

    let hits_before = l2_table.stats().l2_hits;
    group.bench_function("get_many of 100 ids all on Valkey", |b| {
        b.iter_custom(|iters| {
            let elapsed = rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let from = window * BATCH;
                    let found = l2_table
                        .get_many(from..from + BATCH)
                        .await
                        .expect("a batch");
                    assert_eq!(found.len() as u64, BATCH);
                    black_box(found);
                    window = (window + 1) % windows;
                }
                start.elapsed()
            });
            many_l2.record(elapsed, iters)
        })
    });
    let l2_hits = l2_table.stats().l2_hits - hits_before;

    group.bench_function("100 gets that hit L1", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                for id in &l1_ids {
                    let value = l1_hit(&l1_table, id).unwrap_or_else(|e| panic!("{e}"));
                    black_box(*value);
                }
            }
            hits.record(start.elapsed(), iters)
        })
    });

    group.bench_function("get_many of 100 ids all in L1", |b| {
        b.iter_custom(|iters| {
            let elapsed = rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let found = l1_table.get_many(&l1_ids).await.expect("a batch");
                    black_box(found);
                }
                start.elapsed()
            });
            many_l1.record(elapsed, iters)
        })
    });
    group.finish();

    assert_eq!(
        loads.load(Ordering::SeqCst),
        0,
        "the L2 table read the source"
    );
    println!("\nBatch reads against their baselines, this run (Valkey at {url}):");
    println!("  get_many on Valkey answered {l2_hits} ids from L2, none from the source");
    let s = |samples: Samples| samples.summary(SAMPLE_SIZE);
    let (mget, many_l2, hits, many_l1) = (s(mget), s(many_l2), s(hits), s(many_l1));
    print_summary("raw MGET of 100", mget);
    print_summary("get_many of 100 on Valkey", many_l2);
    print_summary("100 L1 hits", hits);
    print_summary("get_many of 100 in L1", many_l1);
    print_ratio(
        "a batch from Valkey (target ≤ 1.3×)",
        ("get_many of 100 on Valkey", many_l2),
        ("raw MGET of 100", mget),
    );
    print_ratio(
        "a batch from L1 (target ≤ 1.2×)",
        ("get_many of 100 in L1", many_l1),
        ("100 L1 hits", hits),
    );
    drop(valkey);
}

criterion_group!(benches, batch);
criterion_main!(benches);
