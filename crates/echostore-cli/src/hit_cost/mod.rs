//! The cache hit cost (the seed's `bcs.4.md` table), measured now: an L1 hit through
//! [`Table::get`] for both L1 backends, the L2 `GET` round trip it replaces, their ratio, and the
//! in-process herd — `--herd` concurrent misses on one key with a 5 ms source — beside a bare
//! tokio oneshot single-flight measured in the same run with the same task spawning.
//!
//! The L1 figure times `get` on keys already in L1, in a shuffled order over `--keys` random ids,
//! single-threaded. An L1 hit completes without awaiting, so each call is polled once with
//! `now_or_never()` and must be ready: the figure is the hit path itself, not the async runtime.

use std::hint::black_box;
use std::time::{Duration, Instant};

use clap::Args;
use echostore::{L1Backend, Store, Table};
use echostore_testkit::Source;
use echostore_testkit::herd::{Herd, SOURCE_LATENCY, herd_table};
use echostore_testkit::measure::{self, Latencies, median};
use echostore_testkit::{filled_table, fixtures};
use rand::seq::SliceRandom;
use redis::AsyncCommands;

use crate::output::{self, Spinner};
use crate::valkey::Target;
use crate::{CliResult, Outcome};
use report::{HerdFigure, HitCostReport, L1Figure, L1Figures, L2Figure};

mod report;

/// At least this many gets per timed L1 round (more passes over small key sets).
const MIN_GETS_PER_ROUND: usize = 500_000;

/// Sequential GETs timed for the L2 round trip, after a warm-up.
const L2_SAMPLES: u64 = 5_000;
const L2_WARMUP: u64 = 200;

/// Flags of `echostore hit-cost`.
#[derive(Debug, Args)]
pub(crate) struct HitCostArgs {
    /// Random keys filled into L1 and read back in a shuffled order.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    keys: u64,

    /// Concurrent misses on one key in the herd measurement.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    herd: u64,

    /// Timed rounds of each measurement; the readout reports the median.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    rounds: u64,

    /// Print one JSON object instead of the readout.
    #[arg(long)]
    json: bool,
}

/// Measures and prints the hit cost.
pub(crate) async fn run(target: &Target, args: &HitCostArgs) -> CliResult<Outcome> {
    output::readout(
        args.json,
        "hit cost: starting",
        async |spinner| measure(target, args, spinner).await,
        |report| report::print_human(report, target),
        // One source read per round, through the store and through the baseline.
        |report| {
            report.herd.store_source_reads == args.rounds
                && report.herd.baseline_source_reads == args.rounds
        },
    )
    .await
}

async fn measure(
    target: &Target,
    args: &HitCostArgs,
    spinner: &Spinner,
) -> CliResult<HitCostReport> {
    let keys = fixtures::seed_like_ids(args.keys as usize);
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.shuffle(&mut rand::rng());

    spinner.say("hit cost: L1 hits, quick_cache");
    let quick_cache = l1_hits(L1Backend::QuickCache, &keys, &order, args.rounds).await?;
    spinner.say("hit cost: L1 hits, moka");
    let moka = l1_hits(L1Backend::Moka, &keys, &order, args.rounds).await?;
    spinner.say("hit cost: L2 GET round trips");
    let l2 = l2_get(target).await?;
    spinner.say("hit cost: the herd");
    let herd = herd(args.herd, args.rounds).await?;

    let ratio = output::round3(l2.median * 1000.0 / quick_cache.ns);
    Ok(HitCostReport {
        readout: "hit-cost",
        valkey: target.shown_url(),
        keys: args.keys,
        rounds: args.rounds,
        l1_hit: L1Figures { quick_cache, moka },
        l2_get_us: l2,
        ratio_l2_over_l1: ratio,
        herd,
        seed: report::SEED,
    })
}

/// Fills a table with `keys`, then times `get` hits in `order`, `rounds` times.
async fn l1_hits(
    backend: L1Backend,
    keys: &[String],
    order: &[usize],
    rounds: u64,
) -> CliResult<L1Figure> {
    // No Valkey: an L1 hit never reaches it, and the fill stays in-process.
    let store = Store::builder().build().await?;
    let table = filled_table(&store, "hitcost", backend, keys, |id| {
        format!("value of {id}")
    })
    .await?;
    let passes = MIN_GETS_PER_ROUND.div_ceil(keys.len()).max(1);
    let gets_per_round = passes * keys.len();
    let hit_pass = |table: &Table<String, String>| -> CliResult<()> {
        for &i in order {
            black_box(measure::l1_hit(table, &keys[i])?);
        }
        Ok(())
    };
    let timed = tokio::task::block_in_place(|| -> CliResult<Vec<f64>> {
        // One untimed pass: warms the caches and proves every key is an L1 hit.
        hit_pass(&table)?;
        (0..rounds)
            .map(|_| {
                let started = Instant::now();
                for _ in 0..passes {
                    hit_pass(&table)?;
                }
                Ok(started.elapsed().as_nanos() as f64 / gets_per_round as f64)
            })
            .collect()
    })?;
    let ns = median(&timed);
    Ok(L1Figure {
        ns: output::round3(ns),
        reads_per_sec: (1e9 / ns) as u64,
        rounds_ns: timed.into_iter().map(output::round3).collect(),
        gets_per_round,
    })
}

/// The median of sequential GETs of a small value over one multiplexed connection.
async fn l2_get(target: &Target) -> CliResult<L2Figure> {
    let mut conn = target.connect().await?;
    let key = format!("hitcost:{{{:016x}}}", rand::random::<u64>());
    let value = "v".repeat(64);
    let _: () = conn.set(&key, &value).await?;
    let mut warm_up = Latencies::default();
    measure::timed_gets(&mut conn, &key, value.as_bytes(), L2_WARMUP, &mut warm_up).await?;
    let mut trips = Latencies::default();
    measure::timed_gets(&mut conn, &key, value.as_bytes(), L2_SAMPLES, &mut trips).await?;
    let _: i64 = conn.del(&key).await?;
    let us = |d: Duration| output::round3(d.as_nanos() as f64 / 1000.0);
    Ok(L2Figure {
        median: us(trips.quantile(0.5)),
        p99: us(trips.quantile(0.99)),
        samples: trips.len(),
        value_bytes: value.len(),
    })
}

/// `callers` concurrent misses on one fresh id per round: the table against the bare baseline.
async fn herd(callers: u64, rounds: u64) -> CliResult<HerdFigure> {
    let (table_source, baseline_source) = (
        Source::taking(SOURCE_LATENCY),
        Source::taking(SOURCE_LATENCY),
    );
    let store = Store::builder().build().await?;
    let table = herd_table(&store, "herd", &table_source).await?;
    let through_table = Herd::tables(vec![table], table_source);
    let baseline = Herd::baseline(baseline_source);
    let (mut store_ms, mut baseline_ms) = (Vec::new(), Vec::new());
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    for round in 0..rounds {
        // Alternate which goes first so that neither always meets a warmer runtime.
        let (first, second) = if round % 2 == 0 {
            (&through_table, &baseline)
        } else {
            (&baseline, &through_table)
        };
        let a = ms(first.run(round, callers as usize).await?);
        let b = ms(second.run(round, callers as usize).await?);
        let (s, b) = if round % 2 == 0 { (a, b) } else { (b, a) };
        store_ms.push(s);
        baseline_ms.push(b);
    }
    let (s, b) = (median(&store_ms), median(&baseline_ms));
    Ok(HerdFigure {
        callers,
        source_latency_ms: ms(SOURCE_LATENCY),
        rounds,
        store_ms: output::round3(s),
        baseline_ms: output::round3(b),
        ratio_store_over_baseline: output::round3(s / b),
        store_source_reads: through_table.reads(),
        baseline_source_reads: baseline.reads(),
        store_rounds_ms: store_ms.into_iter().map(output::round3).collect(),
        baseline_rounds_ms: baseline_ms.into_iter().map(output::round3).collect(),
    })
}
