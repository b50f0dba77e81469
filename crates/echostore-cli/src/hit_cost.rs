//! The cache hit cost (the seed's `bcs.4.md` table), measured now: an L1 hit through
//! [`Table::get`] for both L1 backends, the L2 `GET` round trip it replaces, their ratio, and the
//! in-process herd — `--herd` concurrent misses on one key with a 5 ms source — beside a bare
//! tokio oneshot single-flight measured in the same run with the same task spawning.
//!
//! The L1 figure times `get` on keys already in L1, in a shuffled order over `--keys` random ids,
//! single-threaded. An L1 hit completes without awaiting, so each call is polled once with
//! `now_or_never()` and must be ready: the figure is the hit path itself, not the async runtime.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Args;
use echostore::{L1Backend, Store, Table};
use futures::{FutureExt, StreamExt};
use rand::Rng;
use rand::distr::Alphanumeric;
use rand::seq::SliceRandom;
use redis::AsyncCommands;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::output::{self, Spinner};
use crate::valkey::Target;
use crate::{CliResult, Outcome, duration};

/// The seed's frozen figures (bcs.4.md · the cache hit cost, against live Valkey).
const SEED_L1_READS_PER_SEC: u64 = 1_311_621;
const SEED_L1_HIT_NS: u64 = 762;
const SEED_L2_GET_US: u64 = 31;
const SEED_RATIO: u64 = 40;

/// The herd's source: how long its one read takes.
const HERD_SOURCE_LATENCY: Duration = Duration::from_millis(5);

/// At least this many gets per timed L1 round (more passes over small key sets).
const MIN_GETS_PER_ROUND: usize = 500_000;

/// Sequential GETs timed for the L2 round trip, after a warm-up.
const L2_SAMPLES: usize = 5_000;
const L2_WARMUP: usize = 200;

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

/// What every measurement caches: a small, id-like value.
type Payload = String;

/// One backend's L1 hit figure.
#[derive(Debug, Serialize)]
struct L1Figure {
    /// Median nanoseconds per hit over the rounds.
    ns: f64,
    /// Hits per second at that median.
    reads_per_sec: u64,
    /// Each round's nanoseconds per hit.
    rounds_ns: Vec<f64>,
    /// Gets timed per round.
    gets_per_round: usize,
}

/// Both backends' L1 figures.
#[derive(Debug, Serialize)]
struct L1Figures {
    quick_cache: L1Figure,
    moka: L1Figure,
}

/// The L2 GET round trip.
#[derive(Debug, Serialize)]
struct L2Figure {
    /// Median microseconds per GET.
    median: f64,
    /// 99th percentile microseconds.
    p99: f64,
    samples: usize,
    value_bytes: usize,
}

/// The in-process herd against the bare single-flight.
#[derive(Debug, Serialize)]
struct HerdFigure {
    callers: u64,
    source_latency_ms: f64,
    rounds: u64,
    /// Median ms until every caller had the value, through `Table::get` (no Valkey).
    store_ms: f64,
    /// The same for the bare oneshot single-flight.
    baseline_ms: f64,
    ratio_store_over_baseline: f64,
    /// Loader calls over all rounds (one per round expected).
    store_source_reads: u64,
    baseline_source_reads: u64,
    store_rounds_ms: Vec<f64>,
    baseline_rounds_ms: Vec<f64>,
}

/// The seed's frozen figures, printed beside ours.
#[derive(Debug, Serialize)]
struct SeedFigures {
    l1_reads_per_sec: u64,
    l1_hit_ns: u64,
    l2_get_us: u64,
    ratio: u64,
}

/// The readout, as printed with `--json`.
#[derive(Debug, Serialize)]
struct HitCostReport {
    readout: &'static str,
    valkey: String,
    keys: u64,
    rounds: u64,
    l1_hit: L1Figures,
    l2_get_us: L2Figure,
    /// L2 GET median over the quick_cache L1 hit median.
    ratio_l2_over_l1: f64,
    herd: HerdFigure,
    seed: SeedFigures,
}

/// Measures and prints the hit cost.
pub(crate) async fn run(target: &Target, args: &HitCostArgs) -> CliResult<Outcome> {
    let spinner = Spinner::start(!args.json, "hit cost: starting");
    let report = measure(target, args, &spinner).await;
    spinner.finish();
    let report = report?;
    if args.json {
        output::print_json(&report)?;
    } else {
        print_human(&report, target);
    }
    let one_read_per_round = report.herd.store_source_reads == args.rounds
        && report.herd.baseline_source_reads == args.rounds;
    Ok(if one_read_per_round {
        Outcome::Held
    } else {
        Outcome::Failed
    })
}

async fn measure(
    target: &Target,
    args: &HitCostArgs,
    spinner: &Spinner,
) -> CliResult<HitCostReport> {
    let keys = random_ids(args.keys as usize);
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
        seed: SeedFigures {
            l1_reads_per_sec: SEED_L1_READS_PER_SEC,
            l1_hit_ns: SEED_L1_HIT_NS,
            l2_get_us: SEED_L2_GET_US,
            ratio: SEED_RATIO,
        },
    })
}

/// `n` random 14-character ids, like the seed's `EMS0ODMggk1d5N`.
fn random_ids(n: usize) -> Vec<String> {
    let mut rng = rand::rng();
    (0..n)
        .map(|_| {
            (&mut rng)
                .sample_iter(Alphanumeric)
                .take(14)
                .map(char::from)
                .collect()
        })
        .collect()
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
    let table = store
        .table::<String, Payload>("hitcost")
        .ttl(Duration::from_secs(3600))
        .l1_backend(backend)
        .l1_capacity(keys.len() * 2 + 1024)
        .loader(|id: String| async move { Ok::<_, std::io::Error>(format!("value of {id}")) })
        .start()
        .await?;
    futures::stream::iter(keys)
        .map(|k| table.get(k))
        .buffer_unordered(256)
        .for_each(|_| async {})
        .await;

    let passes = MIN_GETS_PER_ROUND.div_ceil(keys.len()).max(1);
    let gets_per_round = passes * keys.len();
    let timed = tokio::task::block_in_place(|| -> CliResult<Vec<f64>> {
        // One untimed pass: warms the caches and proves every key is an L1 hit.
        hit_pass(&table, keys, order)?;
        (0..rounds)
            .map(|_| {
                let started = Instant::now();
                for _ in 0..passes {
                    hit_pass(&table, keys, order)?;
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

/// One `get` of every key in `order`; each must complete at once (an L1 hit).
fn hit_pass(table: &Table<String, Payload>, keys: &[String], order: &[usize]) -> CliResult<()> {
    for &i in order {
        match table.get(&keys[i]).now_or_never() {
            Some(Ok(value)) => {
                black_box(value);
            }
            Some(Err(e)) => return Err(format!("get {:?} failed: {e}", keys[i]).into()),
            None => {
                return Err(format!(
                    "get {:?} was not an L1 hit (it had to wait): the timed loop needs every key in L1",
                    keys[i]
                )
                .into());
            }
        }
    }
    Ok(())
}

/// The median of sequential GETs of a small value over one multiplexed connection.
async fn l2_get(target: &Target) -> CliResult<L2Figure> {
    let mut conn = target.connect().await?;
    let key = format!("hitcost:{{{:016x}}}", rand::random::<u64>());
    let value = "v".repeat(64);
    let _: () = conn.set(&key, &value).await?;
    let mut samples = Vec::with_capacity(L2_SAMPLES);
    for i in 0..L2_WARMUP + L2_SAMPLES {
        let started = Instant::now();
        let got: Option<String> = conn.get(&key).await?;
        let took = started.elapsed();
        if got.as_deref() != Some(value.as_str()) {
            return Err(format!("GET {key} returned {got:?}, not the value just SET").into());
        }
        if i >= L2_WARMUP {
            samples.push(took.as_nanos() as f64 / 1000.0);
        }
    }
    let _: i64 = conn.del(&key).await?;
    samples.sort_by(f64::total_cmp);
    Ok(L2Figure {
        median: output::round3(quantile_sorted(&samples, 0.5)),
        p99: output::round3(quantile_sorted(&samples, 0.99)),
        samples: samples.len(),
        value_bytes: value.len(),
    })
}

/// `callers` concurrent misses on one fresh key per round: the table against the bare baseline.
async fn herd(callers: u64, rounds: u64) -> CliResult<HerdFigure> {
    let store_reads = Arc::new(AtomicU64::new(0));
    let store = Store::builder().build().await?;
    let counter = Arc::clone(&store_reads);
    let table = store
        .table::<String, Payload>("herd")
        .ttl(Duration::from_secs(3600))
        .loader(move |id: String| {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(HERD_SOURCE_LATENCY).await;
                Ok::<_, std::io::Error>(format!("value of {id}"))
            }
        })
        .start()
        .await?;
    let baseline = Arc::new(SingleFlight::new(HERD_SOURCE_LATENCY));

    let mut store_ms = Vec::new();
    let mut baseline_ms = Vec::new();
    for round in 0..rounds {
        let key = format!("herd-{round}-{:016x}", rand::random::<u64>());
        // Alternate which goes first so that neither always meets a warmer runtime.
        let (s, b) = if round % 2 == 0 {
            let s = herd_store(&table, &key, callers).await?;
            (s, herd_baseline(&baseline, &key, callers).await?)
        } else {
            let b = herd_baseline(&baseline, &key, callers).await?;
            (herd_store(&table, &key, callers).await?, b)
        };
        store_ms.push(s.as_secs_f64() * 1000.0);
        baseline_ms.push(b.as_secs_f64() * 1000.0);
    }
    let (s, b) = (median(&store_ms), median(&baseline_ms));
    Ok(HerdFigure {
        callers,
        source_latency_ms: HERD_SOURCE_LATENCY.as_secs_f64() * 1000.0,
        rounds,
        store_ms: output::round3(s),
        baseline_ms: output::round3(b),
        ratio_store_over_baseline: output::round3(s / b),
        store_source_reads: store_reads.load(Ordering::SeqCst),
        baseline_source_reads: baseline.reads.load(Ordering::SeqCst),
        store_rounds_ms: store_ms.into_iter().map(output::round3).collect(),
        baseline_rounds_ms: baseline_ms.into_iter().map(output::round3).collect(),
    })
}

/// Spawns `callers` tasks that each `get` `key`; the time until all of them have the value.
async fn herd_store(
    table: &Table<String, Payload>,
    key: &str,
    callers: u64,
) -> CliResult<Duration> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let table = table.clone();
            let key = key.to_owned();
            tokio::spawn(async move { table.get(&key).await.map(drop) })
        })
        .collect();
    for joined in futures::future::join_all(tasks).await {
        joined.map_err(|e| format!("a herd task failed: {e}"))??;
    }
    Ok(started.elapsed())
}

/// The same spawning pattern against the bare single-flight.
async fn herd_baseline(flight: &Arc<SingleFlight>, key: &str, callers: u64) -> CliResult<Duration> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let flight = Arc::clone(flight);
            let key = key.to_owned();
            tokio::spawn(async move { flight.get(&key).await.map(drop) })
        })
        .collect();
    for joined in futures::future::join_all(tasks).await {
        joined.map_err(|e| format!("a herd task failed: {e}"))??;
    }
    Ok(started.elapsed())
}

/// One slot of the bare single-flight: a load in progress with its parked callers, or its value.
enum Slot {
    Loading(Vec<oneshot::Sender<Arc<Payload>>>),
    /// Kept so that a caller spawned after the load finished does not start a second one, as the
    /// table's L1 would answer it.
    Ready(Arc<Payload>),
}

/// The baseline: the least single-flight that tokio allows — a mutex over a map of parked callers.
/// The first caller of a key loads it (sleeps the source latency) and wakes the others through
/// their oneshots.
struct SingleFlight {
    slots: Mutex<HashMap<String, Slot>>,
    reads: AtomicU64,
    latency: Duration,
}

impl SingleFlight {
    fn new(latency: Duration) -> Self {
        SingleFlight {
            slots: Mutex::new(HashMap::new()),
            reads: AtomicU64::new(0),
            latency,
        }
    }

    async fn get(&self, key: &str) -> CliResult<Arc<Payload>> {
        let parked = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            match slots.get_mut(key) {
                Some(Slot::Ready(value)) => return Ok(Arc::clone(value)),
                Some(Slot::Loading(waiters)) => {
                    let (tx, rx) = oneshot::channel();
                    waiters.push(tx);
                    Some(rx)
                }
                None => {
                    slots.insert(key.to_owned(), Slot::Loading(Vec::new()));
                    None
                }
            }
        };
        if let Some(rx) = parked {
            return rx
                .await
                .map_err(|_| "the loading caller went away before answering".into());
        }
        self.reads.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.latency).await;
        let value = Arc::new(format!("value of {key}"));
        let previous = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.to_owned(), Slot::Ready(Arc::clone(&value)));
        if let Some(Slot::Loading(waiters)) = previous {
            for tx in waiters {
                let _ = tx.send(Arc::clone(&value));
            }
        }
        Ok(value)
    }
}

/// The median of unsorted figures.
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    quantile_sorted(&sorted, 0.5)
}

/// The `q` quantile of sorted figures (nearest rank); 0 for none.
fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn print_human(r: &HitCostReport, target: &Target) {
    let q = &r.l1_hit.quick_cache;
    let m = &r.l1_hit.moka;
    let h = &r.herd;
    println!(
        "the cache hit cost · {} keys · median of {} rounds · against the {}",
        output::grouped(r.keys),
        r.rounds,
        target.describe()
    );
    println!();
    let row = |label: &str, now: String, seed: String| {
        let line = format!("  {label:<30} {now:<34} {seed}");
        println!("{}", line.trim_end());
    };
    row("", "measured now".into(), "seed (bcs.4.md, frozen)".into());
    row(
        "L1 hit reads/s, quick_cache",
        format!(
            "{:>11}   {} ns each",
            output::grouped(q.reads_per_sec),
            ns(q.ns)
        ),
        format!(
            "{}   ← {} ns each, caller-side ETS",
            output::grouped(r.seed.l1_reads_per_sec),
            r.seed.l1_hit_ns
        ),
    );
    row(
        "L1 hit reads/s, moka",
        format!(
            "{:>11}   {} ns each",
            output::grouped(m.reads_per_sec),
            ns(m.ns)
        ),
        String::new(),
    );
    row(
        "L2 GET",
        format!(
            "{} µs   (p99 {} µs)",
            us(r.l2_get_us.median),
            us(r.l2_get_us.p99)
        ),
        format!("{} us   ← the round trip the herd avoids", r.seed.l2_get_us),
    );
    row(
        "the L1 hit is",
        format!("{} times cheaper", times(r.ratio_l2_over_l1)),
        format!(
            "{} times   cheaper than the round trip it replaces",
            r.seed.ratio
        ),
    );
    println!(
        "  {:<30} {} times cheaper than the L2 GET",
        "  (moka's L1 hit)",
        times(r.l2_get_us.median * 1000.0 / m.ns)
    );
    println!();
    println!(
        "  the herd: {} concurrent misses on one key, {} source, in-process (no Valkey)",
        output::grouped(h.callers),
        duration::render(HERD_SOURCE_LATENCY)
    );
    println!(
        "    {:<28} {:>8} ms until every caller had the value · {} source reads in {} rounds",
        "echostore Table::get",
        output::ms(h.store_ms),
        h.store_source_reads,
        h.rounds
    );
    println!(
        "    {:<28} {:>8} ms                                   · {} source reads in {} rounds",
        "bare oneshot single-flight",
        output::ms(h.baseline_ms),
        h.baseline_source_reads,
        h.rounds
    );
    println!(
        "    {:<28} {:>8}×",
        "store / baseline",
        format!("{:.2}", h.ratio_store_over_baseline)
    );
    println!();
    println!(
        "An L1 hit costs {} ns against a {} µs round trip: {} times cheaper (the seed measured {} ns, {} µs, {}×).",
        ns(q.ns),
        us(r.l2_get_us.median),
        times(r.ratio_l2_over_l1),
        r.seed.l1_hit_ns,
        r.seed.l2_get_us,
        r.seed.ratio
    );
}

/// Nanoseconds with one decimal under a hundred.
fn ns(value: f64) -> String {
    if value < 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

/// Microseconds with one decimal.
fn us(value: f64) -> String {
    format!("{value:.1}")
}

/// A ratio as a whole number when it is large.
fn times(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}
