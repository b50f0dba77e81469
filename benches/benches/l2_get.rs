//! What a trip to L2 costs against an L1 hit, in one run against a live embedded Valkey: a raw
//! `GET` of a small value over a redis-rs multiplexed connection (the baseline: the round trip a
//! hit saves), `Table::get` on an L1 miss that is an L2 hit (the round trip plus the owner hop,
//! the decode and the L1 insert), and a quick_cache L1 hit over 100k random keys. The ratio
//! "L2 GET / L1 hit" is the seed's `bcs.4.md` figure (31 µs / 762 ns = 40×).
//!
//! Every L2 read is sequential: one round trip at a time, as one caller sees it.
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use echostore::{L1Backend, Origin, Store, Table};
use echostore_benches::{
    Samples, filled_table, human, measurement_time, print_ratio, print_summary, random_ids,
    runtime, size,
};
use embedded_valkey::EmbeddedValkey;
use futures::FutureExt;
use redis::AsyncCommands;

/// The raw GET reads a value of this many bytes; the table's values are strings of the same
/// length (on Valkey they sit in an envelope about 20 bytes longer).
const VALUE_BYTES: usize = 64;

const SAMPLE_SIZE: usize = 100;

fn value_of(id: u64) -> String {
    let mut value = format!("value of {id} ");
    value.extend(std::iter::repeat_n(
        'v',
        VALUE_BYTES.saturating_sub(value.len()),
    ));
    value
}

/// A table whose every `get` is an L1 miss and an L2 hit.
///
/// Its L1 holds one entry and the bench cycles through `keys` ids in order, so the id asked for
/// is never the one L1 kept from the previous get. The values were `put` beforehand through
/// another store (as another process would have filled Valkey), so this table's own L1 never saw
/// them. Its loader counts its calls and fails: a get that reached the source would show up, and
/// each timed `fetch` checks that its answer's origin is `L2`.
async fn l2_only_table(url: &str, keys: u64, loads: Arc<AtomicU64>) -> Table<u64, String> {
    let writer = Store::builder()
        .valkey(url)
        .require_valkey(true)
        .build()
        .await
        .expect("writer store");
    let filler = writer
        .table::<u64, String>("bench-l2")
        .ttl(Duration::from_secs(3600))
        .loader(|_id: u64| async move { Err::<String, _>(std::io::Error::other("never loaded")) })
        .start()
        .await
        .expect("writer table");
    for id in 0..keys {
        filler.put(&id, value_of(id)).await.expect("put");
    }
    let reader = Store::builder()
        .valkey(url)
        .require_valkey(true)
        .build()
        .await
        .expect("reader store");
    reader
        .table::<u64, String>("bench-l2")
        .ttl(Duration::from_secs(3600))
        .l1_capacity(1)
        .loader(move |_id: u64| {
            let loads = Arc::clone(&loads);
            async move {
                loads.fetch_add(1, Ordering::SeqCst);
                Err::<String, _>(std::io::Error::other("the L2 bench must never load"))
            }
        })
        .start()
        .await
        .expect("reader table")
}

/// The `q` quantile of sorted nanoseconds (nearest rank), as a float; `None` for none.
fn quantile(sorted: &[u64], q: f64) -> Option<f64> {
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).map(|&ns| ns as f64)
}

/// `total_commands_processed` from Valkey's `INFO stats`.
async fn commands_processed(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .expect("INFO stats");
    info.lines()
        .find_map(|line| line.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_commands_processed in INFO stats")
}

fn l2_get(c: &mut Criterion) {
    let rt = runtime();
    let valkey = EmbeddedValkey::start().expect("an embedded valkey-server");
    let url = valkey.url();
    let keys = size(10_000, 1_000) as u64;

    // (a) the baseline: a raw GET over one multiplexed connection.
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
    let l2_table = rt.block_on(l2_only_table(&url, keys, Arc::clone(&loads)));

    // (c) an L1 hit, as in `l1_hit`: quick_cache, 100k random keys, one thread.
    let l1_keys = size(100_000, 10_000) as u64;
    let store = rt.block_on(Store::builder().build()).expect("store");
    let l1_table = rt.block_on(filled_table(&store, L1Backend::QuickCache, l1_keys));
    let ids = random_ids(l1_keys, size(1 << 20, 1 << 16));

    let raw = Samples::default();
    let through_table = Samples::default();
    // Each round trip's own time too: criterion's figure is a mean per sample, which a few slow
    // wake-ups pull up; the median round trip is the figure `echostore hit-cost` and the seed give.
    let mut raw_trips: Vec<u64> = Vec::new();
    let mut table_trips: Vec<u64> = Vec::new();
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
                    for _ in 0..iters {
                        let trip = Instant::now();
                        let got: Option<Vec<u8>> = conn.get("bench-raw:{0}").await.expect("GET");
                        raw_trips.push(trip.elapsed().as_nanos() as u64);
                        black_box(got.expect("the raw value is there"));
                    }
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
                        table_trips.push(trip.elapsed().as_nanos() as u64);
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
                    let value = l1_table
                        .get(&ids[at])
                        .now_or_never()
                        .expect("an L1 hit completes without waiting")
                        .expect("a value");
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
    for (name, trips) in [
        ("raw GET", &mut raw_trips),
        ("Table::get L2 hit", &mut table_trips),
    ] {
        trips.sort_unstable();
        if let (Some(median), Some(p99)) = (quantile(trips, 0.5), quantile(trips, 0.99)) {
            println!(
                "  {name}, each round trip ({} timed, warm-up included): median {}, p99 {}",
                trips.len(),
                human(median),
                human(p99)
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
    if let (Some(trip), Some(hit)) = (quantile(&raw_trips, 0.5), l1) {
        println!(
            "  the seed's 40×, per round trip: median raw GET / L1 hit = {:.2}×",
            trip / hit.median_ns
        );
    }
    drop(valkey);
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = l2_get
}
criterion_main!(benches);
