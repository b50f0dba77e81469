//! What a trip to L2 costs against an L1 hit, in one run against a live embedded Valkey: a raw
//! `GET` of a small value over a redis-rs multiplexed connection (the baseline: the round trip a
//! hit saves), `Table::get` on an L1 miss that is an L2 hit (the round trip plus the owner hop,
//! the decode and the L1 insert), and a quick_cache L1 hit over 100k random keys. The ratio
//! "L2 GET / L1 hit" is the seed's `bcs.4.md` figure; `docs/benchmarks.md` has the seed's
//! figures and ours.
//!
//! Every L2 read is sequential: one round trip at a time, as one caller sees it.
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use echostore::{L1Backend, Origin, Store};
use echostore_testkit::fixtures::{VALUE_BYTES, l2_only_table, value_of};
use echostore_testkit::info::commands_processed;
use echostore_testkit::measure::{Latencies, l1_hit, timed_gets};
use echostore_testkit::{
    Samples, filled_table, human, measurement_time, print_ratio, print_summary, random_ids,
    runtime, size,
};
use embedded_valkey::EmbeddedValkey;
use redis::AsyncCommands;

const SAMPLE_SIZE: usize = 100;

fn l2_get(c: &mut Criterion) {
    let rt = runtime();
    let valkey = EmbeddedValkey::start().expect("an embedded valkey-server");
    let url = valkey.url();
    let keys = size(10_000, 1_000) as u64;

    // (a) the baseline: a raw GET over one multiplexed connection.
    let raw_value = value_of(0).into_bytes();
    let mut conn = rt.block_on(async {
        let client = redis::Client::open(url.as_str()).expect("valkey url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("a multiplexed connection");
        let _: () = conn
            .set("bench-raw:{0}", value_of(0))
            .await
            .expect("SET the raw value");
        conn
    });

    // (b) Table::get on an L1 miss that is an L2 hit.
    let loads = Arc::new(AtomicU64::new(0));
    let l2_table = rt
        .block_on(l2_only_table(&url, "bench-l2", keys, Arc::clone(&loads)))
        .expect("an L2-only table");

    // (c) an L1 hit, as in `l1_hit`: quick_cache, 100k random keys, one thread.
    let l1_keys = size(100_000, 10_000) as u64;
    let store = rt.block_on(Store::builder().build()).expect("store");
    let all: Vec<u64> = (0..l1_keys).collect();
    let l1_table = rt
        .block_on(filled_table(
            &store,
            "bench-l1",
            L1Backend::QuickCache,
            &all,
            |id| id.wrapping_mul(31),
        ))
        .expect("a filled table");
    let ids = random_ids(l1_keys, size(1 << 20, 1 << 16));

    let raw = Samples::default();
    let through_table = Samples::default();
    // Each round trip's own time too: criterion's figure is a mean per sample, which a few slow
    // wake-ups pull up; the median round trip is the figure the seed gives.
    let mut raw_trips = Latencies::default();
    let mut table_trips = Latencies::default();
    let l1 = Samples::default();
    let mut group = c.benchmark_group("an L2 GET against an L1 hit");
    group.measurement_time(measurement_time());
    group.sample_size(SAMPLE_SIZE);
    group.throughput(Throughput::Elements(1));

    group.bench_function(
        format!("a raw GET of a {VALUE_BYTES}-byte value over one multiplexed connection"),
        |b| {
            b.iter_custom(|iters| {
                let elapsed = rt.block_on(async {
                    let start = Instant::now();
                    timed_gets(
                        &mut conn,
                        "bench-raw:{0}",
                        &raw_value,
                        iters,
                        &mut raw_trips,
                    )
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                    start.elapsed()
                });
                raw.record(elapsed, iters)
            })
        },
    );

    // Valkey's own count of commands, read around the table's function: it shows how many round
    // trips one L2 hit makes (one GET expected), so the overhead over the raw GET is not extra I/O.
    let commands_before = rt.block_on(commands_processed(&mut conn));
    let hits_before = l2_table.stats().l2_hits;
    let mut next = 0u64;
    group.bench_function(
        format!("Table::get on an L1 miss that is an L2 hit, cycling over {keys} keys"),
        |b| {
            b.iter_custom(|iters| {
                let elapsed = rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let trip = Instant::now();
                        let fetched = l2_table.fetch(&next).await.expect("an L2 hit");
                        table_trips.record(trip.elapsed());
                        assert_eq!(fetched.origin, Origin::L2, "id {next} did not come from L2");
                        black_box(fetched.value);
                        next = (next + 1) % keys;
                    }
                    start.elapsed()
                });
                through_table.record(elapsed, iters)
            })
        },
    );

    // Minus one: the INFO that reads the count.
    let commands = rt.block_on(commands_processed(&mut conn)) - commands_before - 1;
    let hits = l2_table.stats().l2_hits - hits_before;

    group.bench_function(
        format!("Table::get on an L1 hit, QuickCache over {l1_keys} random keys"),
        |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                let mut at = 0;
                for _ in 0..iters {
                    let value = l1_hit(&l1_table, &ids[at]).unwrap_or_else(|e| panic!("{e}"));
                    black_box(*value);
                    at = if at + 1 == ids.len() { 0 } else { at + 1 };
                }
                l1.record(start.elapsed(), iters)
            })
        },
    );
    group.finish();

    assert_eq!(
        loads.load(Ordering::SeqCst),
        0,
        "the L2 table read the source"
    );
    let stats = l2_table.stats();
    println!("\nL2 GET against the L1 hit, this run (Valkey at {url}):");
    println!(
        "  the L2 table: {} l2_hits, {} l1_hits, {} source_reads",
        stats.l2_hits, stats.l1_hits, stats.source_reads
    );
    let (raw, through_table, l1) = (
        raw.summary(SAMPLE_SIZE),
        through_table.summary(SAMPLE_SIZE),
        l1.summary(SAMPLE_SIZE),
    );
    println!(
        "  Valkey processed {commands} commands for {hits} L2 hits: {:.3} per hit",
        commands as f64 / hits.max(1) as f64
    );
    let ns = |d: Duration| d.as_nanos() as f64;
    for (name, trips) in [("raw GET", &raw_trips), ("Table::get L2 hit", &table_trips)] {
        if !trips.is_empty() {
            println!(
                "  {name}, each round trip ({} timed, warm-up included): median {}, p99 {}",
                trips.len(),
                human(ns(trips.quantile(0.5))),
                human(ns(trips.quantile(0.99)))
            );
        }
    }
    print_summary("raw GET", raw);
    print_summary("Table::get L2 hit", through_table);
    print_summary("L1 hit", l1);
    print_ratio("the seed's 40×", ("raw GET", raw), ("L1 hit", l1));
    print_ratio(
        "a miss served by L2",
        ("Table::get L2 hit", through_table),
        ("L1 hit", l1),
    );
    print_ratio(
        "the table's overhead on the round trip",
        ("Table::get L2 hit", through_table),
        ("raw GET", raw),
    );
    if let (false, Some(hit)) = (raw_trips.is_empty(), l1) {
        println!(
            "  the seed's 40×, per round trip: median raw GET / L1 hit = {:.2}×",
            ns(raw_trips.quantile(0.5)) / hit.median_ns
        );
    }
    drop(valkey);
}

criterion_group!(benches, l2_get);
criterion_main!(benches);
