//! EchoStore against its peers, every figure a ratio to a baseline measured in the same run:
//!
//! 1. **an L2 hit**: `Table::fetch` on an L1 miss answered by Valkey (values written by another
//!    store, as another process would have), against a raw redis-rs `GET` of the very same keys
//!    over one multiplexed connection;
//! 2. **a herd**: 10,000 callers (1,000 under `CI`) miss one fresh key whose source takes 5 ms,
//!    through a table without Valkey (the owner's flights), against the bare mutex + oneshot
//!    single-flight and against moka's `future::Cache::get_with`;
//! 3. **an L1 hit** in a plain async loop on a runtime worker, over 100k random `u64` keys with
//!    64-byte values, against a bare quick_cache lookup of an `Arc` and moka's
//!    `future::Cache::get`, and against the same table with an events subscriber (`Table::events`);
//! 4. **misses on distinct ids**: 8 tasks each `get` ids nobody has asked for, through a table
//!    without Valkey whose loader answers at once (the owners' flights, spread over the table's
//!    shards), against moka's `future::Cache::get_with` doing the same, and against the same
//!    table with one owner (`.shards(1)`).
//!
//! The figures that count are the **interleaved rounds** printed first: each round runs every
//! contender of a row once, in a rotated order, and the ratio is taken per round (so a noisy
//! neighbour slows both sides of it) and reported as the median over the rounds. Criterion then
//! measures each contender on its own for its usual report. Every herd asserts one source read,
//! every L2 fetch asserts its origin, so a build that broke either cannot produce a figure. The
//! run's per-round ratios are drawn in `docs/benchmarks/peers.svg` (docs/benchmarks.md shows it).
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use echostore::{L1Backend, Origin, Store};
use echostore_testkit::Source;
use echostore_testkit::fixtures::{VALUE_BYTES, l2_only_table, value_of};
use echostore_testkit::herd::{Herd, SOURCE_LATENCY, herd_table};
use echostore_testkit::measure::median;
use echostore_testkit::{
    filled_table, human, measurement_time, random_ids, runtime, size, under_ci,
};
use embedded_valkey::EmbeddedValkey;
use redis::AsyncCommands;

/// One contender: runs `iters` operations and returns the time they took.
type Run<'a> = Box<dyn FnMut(u64) -> Duration + 'a>;

/// One row of the table: its contenders (the first is EchoStore's), how many operations a round
/// gives each, and which contenders EchoStore is reported against.
struct Row<'a> {
    title: String,
    batch: u64,
    /// Interleaved rounds: the run's count, or more and shorter ones for a row whose baseline
    /// shifts between modes (the L2 row).
    rounds: usize,
    contenders: Vec<(&'static str, Run<'a>)>,
}

/// Runs `row.rounds` interleaved rounds of `row` and prints each contender's median per operation and
/// EchoStore's ratio to each other contender (the median of the per-round ratios).
fn interleaved(row: &mut Row<'_>) -> Vec<Ratio> {
    let (n, rounds) = (row.contenders.len(), row.rounds);
    let mut per_op: Vec<Vec<f64>> = vec![Vec::new(); n];
    // A warm-up round, not recorded.
    for (_, run) in &mut row.contenders {
        run(row.batch.div_ceil(4));
    }
    for round in 0..rounds {
        for k in 0..n {
            let at = (round + k) % n;
            let elapsed = (row.contenders[at].1)(row.batch);
            per_op[at].push(elapsed.as_nanos() as f64 / row.batch as f64);
        }
    }
    println!("\n{} ({rounds} interleaved rounds):", row.title);
    for ((name, _), times) in row.contenders.iter().zip(&per_op) {
        println!("  {name}: median {}", human(median(times)));
    }
    let mut ratios = Vec::new();
    for k in 1..n {
        let each: Vec<f64> = per_op[0]
            .iter()
            .zip(&per_op[k])
            .map(|(ours, theirs)| ours / theirs)
            .collect();
        let (lo, hi) = (
            each.iter().copied().fold(f64::INFINITY, f64::min),
            each.iter().copied().fold(0.0, f64::max),
        );
        let ratio = median(&each);
        println!(
            "  {} / {}: {ratio:.2}× (rounds {lo:.2}–{hi:.2}×)",
            row.contenders[0].0, row.contenders[k].0
        );
        ratios.push(Ratio {
            label: format!("{} / {}", short(&row.title), row.contenders[k].0),
            peer: row.contenders[k].0,
            median: ratio,
            rounds: each,
        });
    }
    ratios
}

/// A row's title up to its first comma (`an L2 hit`, `a herd of 10000 misses on one key`).
fn short(title: &str) -> &str {
    title.split(',').next().unwrap_or(title)
}

/// EchoStore's ratio to one peer in one row: per round, and their median.
struct Ratio {
    label: String,
    peer: &'static str,
    median: f64,
    rounds: Vec<f64>,
}

/// Where the plot of this run's ratios goes: `docs/benchmarks/peers.svg` in the workspace.
fn plot_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/benchmarks/peers.svg")
}

/// Draws every ratio of the run as a row of dots (one per round) and its median, on a log axis
/// with 1× marked: under the line EchoStore is the faster.
fn plot(ratios: &[&Ratio], path: &std::path::Path) -> Result<(), String> {
    use plotters::prelude::*;
    let all = ratios.iter().flat_map(|r| r.rounds.iter().copied());
    let (lo, hi) = all.fold((1.0_f64, 1.0_f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let (lo, hi) = (lo / 1.3, hi * 1.3);
    let rows = ratios.len() as f64;
    let root = SVGBackend::new(path, (1000, 80 + 50 * ratios.len() as u32)).into_drawing_area();
    let e = |e: DrawingAreaErrorKind<_>| format!("{}: {e:?}", path.display());
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "EchoStore against its peers, same run (per-round ratios)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(380)
        .build_cartesian_2d((lo..hi).log_scale(), -0.5..rows - 0.5)
        .map_err(e)?;
    let names: Vec<&str> = ratios.iter().map(|r| r.label.as_str()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(ratios.len())
        .y_label_formatter(&|y| {
            let at = y.round();
            match names.get(at as usize) {
                Some(name) if (y - at).abs() < 0.01 => (*name).to_owned(),
                _ => String::new(),
            }
        })
        .x_labels(12)
        .x_desc("EchoStore's time / the peer's (log scale; < 1: EchoStore faster)")
        .x_label_formatter(&|x| format!("{x:.2}×"))
        .draw()
        .map_err(e)?;
    chart
        .draw_series(LineSeries::new(
            [(1.0, -0.5), (1.0, rows - 0.5)],
            BLACK.stroke_width(1),
        ))
        .map_err(e)?;
    for (at, ratio) in ratios.iter().enumerate() {
        let y = at as f64;
        let dots = ratio
            .rounds
            .iter()
            .map(|&x| Circle::new((x, y), 3, BLUE.mix(0.5).filled()));
        chart.draw_series(dots).map_err(e)?;
        let median = Circle::new((ratio.median, y), 7, RED.stroke_width(2));
        chart.draw_series(std::iter::once(median)).map_err(e)?;
    }
    root.present().map_err(e)
}

/// `true` unless `PEERS_ONLY` is set and `title` does not contain it: the interleaved rounds of
/// one row alone (`PEERS_ONLY=herd`), as when comparing two builds on that row.
fn chosen(title: &str) -> bool {
    std::env::var("PEERS_ONLY").map_or(true, |only| title.contains(&only))
}

/// A row's interleaved rounds: its usual count times `PEERS_ROUNDS_TIMES` when set (more rounds, a
/// tighter median).
fn rounds_of(usual: usize) -> usize {
    let times = std::env::var("PEERS_ROUNDS_TIMES")
        .ok()
        .and_then(|n| n.parse().ok());
    usual * times.unwrap_or(1).max(1)
}

/// Each contender of `row` measured by criterion on its own.
fn criterion_row(c: &mut Criterion, row: &mut Row<'_>, herd: bool) {
    let mut group = c.benchmark_group(row.title.clone());
    group.measurement_time(measurement_time());
    if herd {
        group.sampling_mode(SamplingMode::Flat);
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(300));
    }
    for (name, run) in &mut row.contenders {
        group.bench_function(*name, |b| b.iter_custom(&mut *run));
    }
    group.finish();
}

/// A contender that awaits `$hit` for each id of `$ids` (from an offset that moves each call), in
/// one task on a runtime worker, with `$state` cloned into the task as `$s`.
macro_rules! async_loop {
    ($rt:expr, $ids:expr, $state:expr, |$($s:ident)+, $id:ident| $hit:expr) => {{
        let (rt, ids, state) = ($rt, Arc::clone($ids), $state);
        Box::new(move |iters: u64| {
            let (ids, $($s)+) = (Arc::clone(&ids), state.clone());
            rt.block_on(async move {
                tokio::spawn(async move {
                    let start = Instant::now();
                    let mut at = (iters as usize).wrapping_mul(7919) % ids.len();
                    for _ in 0..iters {
                        let $id = ids[at];
                        $hit;
                        at = if at + 1 == ids.len() { 0 } else { at + 1 };
                    }
                    start.elapsed()
                })
                .await
                .expect("the timed task")
            })
        }) as Run<'_>
    }};
}

/// Tasks that miss at once in the distinct-id row.
const MISS_TASKS: u64 = 8;

/// A contender that spawns [`MISS_TASKS`] tasks, each awaiting `miss(state, id)` for its share
/// of `iters` ids never asked for before (taken from `fresh`), and times them all.
fn spread<'a, S, F, Fut>(
    rt: &'a tokio::runtime::Runtime,
    fresh: &Arc<AtomicU64>,
    state: S,
    miss: F,
) -> Run<'a>
where
    S: Clone + Send + 'static,
    F: Fn(S, u64) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let fresh = Arc::clone(fresh);
    Box::new(move |iters| {
        let each = iters.div_ceil(MISS_TASKS);
        rt.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = (0..MISS_TASKS)
                .map(|_| {
                    let (state, first) = (state.clone(), fresh.fetch_add(each, Ordering::Relaxed));
                    tokio::spawn(async move {
                        for id in first..first + each {
                            miss(state.clone(), id).await;
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("a miss task");
            }
            start.elapsed()
        })
    })
}

fn peers(c: &mut Criterion) {
    let rt = runtime();
    let rounds = if under_ci() { 3 } else { 7 };
    let valkey = EmbeddedValkey::start().expect("an embedded valkey-server");
    let url = valkey.url();

    // Row 1: an L2 hit against a raw GET of the same key.
    let keys = size(100_000, 5_000) as u64;
    let loads = Arc::new(AtomicU64::new(0));
    let reader = rt
        .block_on(l2_only_table(&url, "bench-peers", keys, Arc::clone(&loads)))
        .expect("an L2-only table");
    let conn = rt.block_on(async {
        redis::Client::open(url.as_str())
            .expect("valkey url")
            .get_multiplexed_async_connection()
            .await
            .expect("a multiplexed connection")
    });
    let l2_ids = Arc::new(random_ids(keys, size(1 << 20, 1 << 16)));
    let mut rows = Vec::new();
    {
        let fetch = async_loop!(&rt, &l2_ids, reader.clone(), |reader, id| {
            let fetched = reader.fetch(&id).await.expect("an L2 hit");
            assert_eq!(fetched.origin, Origin::L2, "id {id} did not come from L2");
            black_box(fetched.value)
        });
        let raw = async_loop!(&rt, &l2_ids, conn.clone(), |mut conn, id| {
            let key = format!("bench-peers:{{{id}}}");
            let bytes: Option<Vec<u8>> = conn.get(&key).await.expect("GET");
            assert!(bytes.is_some_and(|b| b.len() > VALUE_BYTES), "GET {key}");
        });
        rows.push(Row {
            title: format!("an L2 hit, {keys} keys, {VALUE_BYTES}-byte values"),
            // Ten times the rounds, each a tenth as long: the loopback round trip here switches
            // between two modes (docs/benchmarks.md) every few hundred ms, and a round that long
            // often met one mode on one side and the other on the other.
            batch: size(400, 50) as u64,
            rounds: rounds * 10,
            contenders: vec![("echostore L2 hit", fetch), ("raw GET", raw)],
        });
    }

    // Row 2: the herd.
    let callers = size(10_000, 1_000);
    let herd_ids = Arc::new(AtomicU64::new(0));
    let (table_herd, bare_herd, moka_herd) = rt.block_on(async {
        let store = Store::builder().build().await.expect("store");
        let source = Source::taking(SOURCE_LATENCY);
        let table = herd_table(&store, "peers-herd", &source)
            .await
            .expect("herd table");
        (
            Herd::tables(vec![table], source),
            Herd::baseline(Source::taking(SOURCE_LATENCY)),
            Herd::moka(Source::taking(SOURCE_LATENCY)),
        )
    });
    {
        let herd_run = |herd: &'static Herd| -> Run<'_> {
            let (rt, ids) = (&rt, Arc::clone(&herd_ids));
            Box::new(move |iters| herd.rounds(rt, &ids, callers, iters))
        };
        let leak = |herd: Herd| -> &'static Herd { Box::leak(Box::new(herd)) };
        rows.push(Row {
            title: format!("a herd of {callers} misses on one key, 5 ms source"),
            batch: size(5, 2) as u64,
            rounds,
            contenders: vec![
                ("echostore herd", herd_run(leak(table_herd))),
                ("bare single-flight", herd_run(leak(bare_herd))),
                ("moka get_with", herd_run(leak(moka_herd))),
            ],
        });
    }

    // Row 3: the L1 hit in an async loop.
    let l1_keys = size(100_000, 10_000) as u64;
    let l1_ids = Arc::new(random_ids(l1_keys, size(1 << 20, 1 << 16)));
    let store = rt.block_on(Store::builder().build()).expect("store");
    let all: Vec<u64> = (0..l1_keys).collect();
    let table = rt
        .block_on(filled_table(
            &store,
            "peers-l1",
            L1Backend::QuickCache,
            &all,
            value_of,
        ))
        .expect("a filled table");
    // The same table again, with an events subscriber kept for the whole run: a hit sends no
    // event, and a subscriber must not make it slower.
    let subscribed = rt
        .block_on(filled_table(
            &store,
            "peers-l1-subscribed",
            L1Backend::QuickCache,
            &all,
            value_of,
        ))
        .expect("a filled table");
    let _events = subscribed.events();
    let bare = Arc::new(quick_cache::sync::Cache::<u64, Arc<String>>::new(
        l1_keys as usize * 2,
    ));
    let moka = moka::future::Cache::<u64, Arc<String>>::new(l1_keys * 2);
    rt.block_on(async {
        for id in 0..l1_keys {
            bare.insert(id, Arc::new(value_of(id)));
            moka.insert(id, Arc::new(value_of(id))).await;
        }
    });
    {
        let echostore = async_loop!(&rt, &l1_ids, table.clone(), |table, id| {
            black_box(table.get(&id).await.expect("an L1 hit"))
        });
        let with_events = async_loop!(&rt, &l1_ids, subscribed.clone(), |table, id| {
            black_box(table.get(&id).await.expect("an L1 hit"))
        });
        let quick = async_loop!(&rt, &l1_ids, Arc::clone(&bare), |bare, id| {
            black_box(bare.get(&id).expect("in the cache"))
        });
        let moka = async_loop!(&rt, &l1_ids, moka.clone(), |moka, id| {
            black_box(moka.get(&id).await.expect("in the cache"))
        });
        rows.push(Row {
            title: format!("an L1 hit in an async loop, {l1_keys} random keys"),
            batch: size(400_000, 20_000) as u64,
            rounds,
            contenders: vec![
                ("echostore L1 hit", echostore),
                ("echostore L1 hit with a subscriber", with_events),
                ("bare quick_cache", quick),
                ("moka::future get", moka),
            ],
        });
    }

    // Row 4: misses on distinct ids from 8 tasks.
    let fresh = Arc::new(AtomicU64::new(1 << 40));
    let miss_loads = Arc::new(AtomicU64::new(0));
    let capacity = size(200_000, 20_000);
    let missing_table = |shards: Option<usize>| {
        let loads = Arc::clone(&miss_loads);
        rt.block_on(async {
            let store = Store::builder().build().await.expect("store");
            let table = store
                .table::<u64, String>("peers-misses")
                .l1_capacity(capacity)
                .loader(move |id: u64| {
                    loads.fetch_add(1, Ordering::Relaxed);
                    async move { Ok::<_, std::io::Error>(value_of(id)) }
                });
            let table = match shards {
                Some(n) => table.shards(n),
                None => table,
            };
            table.build().await.expect("a table without Valkey")
        })
    };
    // The default shards (the cores), and one owner for the whole table as before sharding.
    let (missing, one_owner) = (missing_table(None), missing_table(Some(1)));
    let moka_misses = moka::future::Cache::<u64, Arc<String>>::new(capacity as u64);
    {
        let gets = |table: &echostore::Table<u64, String>| {
            spread(&rt, &fresh, table.clone(), |table, id| async move {
                black_box(table.get(&id).await.expect("a load"));
            })
        };
        let (echostore, alone) = (gets(&missing), gets(&one_owner));
        let moka = spread(&rt, &fresh, moka_misses.clone(), |moka, id| async move {
            let value = moka.get_with(id, async move { Arc::new(value_of(id)) });
            black_box(value.await);
        });
        rows.push(Row {
            title: format!("misses on distinct ids, {MISS_TASKS} tasks"),
            batch: size(80_000, 8_000) as u64,
            rounds,
            contenders: vec![
                ("echostore miss", echostore),
                ("moka get_with", moka),
                ("echostore, 1 shard", alone),
            ],
        });
    }

    let mut summary = Vec::new();
    for row in rows.iter_mut().filter(|row| chosen(&row.title)) {
        row.rounds = rounds_of(row.rounds);
        summary.push((row.title.clone(), interleaved(row)));
    }
    for (at, row) in rows.iter_mut().enumerate() {
        criterion_row(c, row, at == 1);
    }

    assert_eq!(
        loads.load(Ordering::SeqCst),
        0,
        "the L2 reader read the source"
    );
    let (misses, alone) = (missing.stats(), one_owner.stats());
    assert_eq!(
        (
            misses.source_reads + alone.source_reads,
            misses.l1_hits + alone.l1_hits
        ),
        (miss_loads.load(Ordering::SeqCst), 0),
        "every distinct id a miss, loaded once"
    );
    assert_eq!((misses.coalesced, alone.coalesced), (0, 0));
    println!("\nEchoStore against its peers, this run (median of per-round ratios):");
    for (title, ratios) in &summary {
        let ratios: Vec<String> = ratios
            .iter()
            .map(|r| format!("{:.2}× {}", r.median, r.peer))
            .collect();
        println!("  {title}: {}", ratios.join(", "));
    }
    let all: Vec<&Ratio> = summary.iter().flat_map(|(_, ratios)| ratios).collect();
    let path = plot_path();
    match plot(&all, &path) {
        Ok(()) => println!("  plotted in {}", path.display()),
        Err(e) => println!("  no plot: {e}"),
    }
    drop(rows);
    drop(valkey);
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = peers
}
criterion_main!(benches);
