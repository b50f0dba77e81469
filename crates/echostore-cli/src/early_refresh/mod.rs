//! Early refresh (XFetch), measured: steady readers on `--stores` independent stores read one hot
//! key over several of its expiries, once with early refresh off (`early_refresh(0.0)`) and once
//! on (`early_refresh(--beta)`), side by side.
//!
//! Each store is its own [`Store`] (own owner, L1, Valkey connection and coherence), as separate
//! processes would have. Each reader is a task that reads the key, pauses `--gap`, and reads again.
//! The source counts its reads and how many ran at once, and takes `--load` per read.
//!
//! A read **waited on a load** when it was not an L1 hit and a source read was running when it
//! started, or started while it waited: it may have joined that load's flight, or polled for its
//! value. This over-counts rather than under-counts (an L2 read that merely overlaps a load in
//! another store counts too). The readout names, per mode: those reads, the read latency
//! (p50 / p99 / max), the source reads per nominal expiry (the run over the ttl), and the
//! overlapping loads, which must be 0 (the one-load invariant).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use clap::Args;
use echostore::{Origin, Store, Table, TableStats};
use echostore_testkit::duration;
use echostore_testkit::measure::{self, Latencies};
use redis::AsyncCommands;
use tokio::time::Instant;

use crate::output::{self, Spinner};
use crate::valkey::Target;
use crate::{CliResult, Outcome};
use report::{EarlyRefreshReport, Measured, ModeReport, Origins};

mod report;

/// The table every store opens.
const TABLE: &str = "early";

/// Sequential GETs timed for the L2 round trip the read latency is compared with.
const L2_SAMPLES: u64 = 500;

/// Flags of `echostore early-refresh`.
#[derive(Debug, Args)]
pub(crate) struct EarlyRefreshArgs {
    /// Logical life of the hot key (jittered ±10 %, the table default).
    #[arg(long, default_value = "600ms", value_parser = duration::parse)]
    ttl: Duration,

    /// How long one source read takes.
    #[arg(long, default_value = "40ms", value_parser = duration::parse)]
    load: Duration,

    /// Independent stores (like separate processes) sharing the one Valkey.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    stores: u32,

    /// Reader tasks per store.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    readers: u32,

    /// How long the readers read, in each mode.
    #[arg(long, default_value = "3s", value_parser = duration::parse)]
    run: Duration,

    /// Each reader's pause between reads.
    #[arg(long, default_value = "1ms", value_parser = duration::parse)]
    gap: Duration,

    /// XFetch beta of the "on" run.
    #[arg(long, default_value_t = 1.0)]
    beta: f64,

    /// Print one JSON object instead of the readout.
    #[arg(long)]
    json: bool,
}

/// Runs both modes and prints the readout.
pub(crate) async fn run(target: &Target, args: &EarlyRefreshArgs) -> CliResult<Outcome> {
    if args.ttl.is_zero() || args.run.is_zero() {
        return Err("--ttl and --run must be above zero".into());
    }
    output::readout(
        args.json,
        "early refresh: measuring the L2 round trip",
        async |spinner| measure_both(target, args, spinner).await,
        |report| report::print_human(report, target),
        |report| report.invariant_held,
    )
    .await
}

async fn measure_both(
    target: &Target,
    args: &EarlyRefreshArgs,
    spinner: &Spinner,
) -> CliResult<EarlyRefreshReport> {
    let l2 = l2_round_trip(target).await?;
    spinner.say("early refresh: off");
    let off = run_mode(target, args, 0.0).await?;
    spinner.say("early refresh: on");
    let on = run_mode(target, args, args.beta).await?;
    Ok(report::summarise(target, args, l2, off, on))
}

/// The median of sequential `GET`s of a small value: what an L2 read costs one caller.
async fn l2_round_trip(target: &Target) -> CliResult<Duration> {
    let mut conn = target.connect().await?;
    let key = format!("{TABLE}:probe-{:016x}", rand::random::<u64>());
    let value = vec![7u8; 32];
    let _: () = conn.set(&key, &value).await?;
    let mut trips = Latencies::default();
    measure::timed_gets(&mut conn, &key, &value, L2_SAMPLES, &mut trips).await?;
    let _: () = conn.del(&key).await?;
    Ok(trips.quantile(0.5))
}

/// The source: counts reads, the reads running now, and reads that started while another ran.
#[derive(Default)]
struct Loads {
    started: AtomicU64,
    running: AtomicU64,
    overlapping: AtomicU64,
}

/// Marks one source read running until dropped (also when the load is cut off).
struct Running<'a>(&'a Loads);

impl<'a> Running<'a> {
    fn start(loads: &'a Loads) -> Self {
        if loads.running.fetch_add(1, SeqCst) > 0 {
            loads.overlapping.fetch_add(1, SeqCst);
        }
        loads.started.fetch_add(1, SeqCst);
        Running(loads)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, SeqCst);
    }
}

/// What one reader saw.
#[derive(Default)]
struct Seen {
    latencies: Vec<Duration>,
    origins: Origins,
    waited_on_load: u64,
}

/// One mode: fresh stores and key, a warm-up read, then the readers for `--run`.
async fn run_mode(target: &Target, args: &EarlyRefreshArgs, beta: f64) -> CliResult<ModeReport> {
    let key = format!("hot-{:016x}", rand::random::<u64>());
    let loads = Arc::new(Loads::default());
    let mut tables = Vec::with_capacity(args.stores as usize);
    for _ in 0..args.stores {
        tables.push(open(target, args, beta, &loads).await?);
    }
    // Warm-up: the first store loads the key, the others read it from Valkey.
    for table in &tables {
        table
            .get(&key)
            .await
            .map_err(|e| format!("warming up: {e}"))?;
    }
    let warm: TableStats = tables.iter().map(Table::stats).sum();
    let loads_before = loads.started.load(SeqCst);

    let until = Instant::now() + args.run;
    let mut readers = Vec::new();
    for table in &tables {
        for _ in 0..args.readers {
            let (table, key, loads, gap) =
                (table.clone(), key.clone(), Arc::clone(&loads), args.gap);
            readers.push(tokio::spawn(async move {
                read_until(&table, &key, &loads, gap, until).await
            }));
        }
    }
    let (mut latencies, mut origins, mut waited_on_load) =
        (Latencies::default(), Origins::default(), 0);
    for reader in readers {
        let one = reader.await.map_err(|e| format!("a reader failed: {e}"))?;
        one.latencies.iter().for_each(|l| latencies.record(*l));
        origins.add(&one.origins);
        waited_on_load += one.waited_on_load;
    }
    settle(&tables).await;
    let stats: TableStats = tables.iter().map(Table::stats).sum();
    if let Some(first) = tables.first() {
        first
            .invalidate(&key)
            .await
            .map_err(|e| format!("cleaning up the key: {e}"))?;
    }
    let measured = Measured {
        latencies,
        origins,
        waited_on_load,
        source_reads: loads.started.load(SeqCst) - loads_before,
        overlapping_loads: loads.overlapping.load(SeqCst),
        stats,
        warm,
    };
    Ok(report::mode(args, beta, measured))
}

/// Waits (up to 10 s) until no flight of `tables` runs: an early refresh the last reads started
/// lands before the run moves on, and before the embedded Valkey stops under its fenced write.
async fn settle(tables: &[Table<String, u64>]) {
    let until = Instant::now() + Duration::from_secs(10);
    while tables.iter().any(|t| t.stats().in_flight > 0) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A store and its table over the counting source.
async fn open(
    target: &Target,
    args: &EarlyRefreshArgs,
    beta: f64,
    loads: &Arc<Loads>,
) -> CliResult<Table<String, u64>> {
    let store = Store::builder()
        .valkey(target.url())
        .require_valkey(true)
        .build()
        .await?;
    let (loads, load) = (Arc::clone(loads), args.load);
    let table = store
        .table::<String, u64>(TABLE)
        .ttl(args.ttl)
        .early_refresh(beta)
        .lock_ttl(Duration::from_secs(5).max(load * 4))
        .loader(move |_id: String| {
            let loads = Arc::clone(&loads);
            async move {
                let _running = Running::start(&loads);
                tokio::time::sleep(load).await; // the source read's cost: the behaviour measured
                Ok::<_, std::io::Error>(loads.started.load(SeqCst))
            }
        })
        .build()
        .await?;
    Ok(table)
}

/// Reads `key` every `gap` until `until`, timing each read and noting where it came from.
async fn read_until(
    table: &Table<String, u64>,
    key: &str,
    loads: &Loads,
    gap: Duration,
    until: Instant,
) -> Seen {
    let mut seen = Seen::default();
    while Instant::now() < until {
        let (running, started) = (loads.running.load(SeqCst), loads.started.load(SeqCst));
        let at = Instant::now();
        let read = table.fetch(key).await;
        seen.latencies.push(at.elapsed());
        let origin = read.as_ref().ok().map(|f| f.origin);
        seen.origins.count(read.as_ref().map(|f| f.origin));
        if origin != Some(Origin::L1) && (running > 0 || loads.started.load(SeqCst) != started) {
            seen.waited_on_load += 1;
        }
        tokio::time::sleep(gap).await; // the readers' pace: steady reads, not synchronisation
    }
    seen
}
