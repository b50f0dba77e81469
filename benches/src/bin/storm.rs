//! The million-id storm, measured: 1,000,000 misses on distinct ids through one table (no Valkey,
//! so the figure is EchoStore's own memory), for each L1 backend, with the peak resident set size
//! (`VmHWM`) before and after. L1 is bounded by `--capacity` entries, or with `--value-bytes N`
//! (each value `N` bytes) by `--capacity-bytes`, weighed by a weigher that counts each value's
//! bytes: then the peak RSS must stay within the byte budget (for moka, which evicts behind its
//! inserts, twice the budget: [`lag`]) plus a fixed allowance ([`RSS_ALLOWANCE_MIB`]), however
//! many bytes the storm loads. The flights map must
//! be empty at the end.
//!
//! ```text
//! cargo run --release -p echostore-benches --bin storm -- [--ids 1000000] [--capacity 10000]
//! cargo run --release -p echostore-benches --bin storm -- --value-bytes 4096 --capacity-bytes 67108864
//! ```
//!
//! Each backend runs in a fresh process (this binary re-runs itself with `--backend`), so one
//! run's peak does not hide the other's.

use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::{Parser, ValueEnum};
use echostore::{L1Backend, Store};
use echostore_testkit::measure::peak_rss_kib;

/// What the peak RSS of a byte-bounded storm may exceed the budget by: the process before the
/// storm, the allocator's freed but unreturned pages, and L1's own tables and per-entry overhead
/// (which the storm's weigher, counting value bytes only, leaves out).
const RSS_ALLOWANCE_MIB: f64 = 48.0;

/// How many budgets of values L1 may hold beyond its own for a moment: quick_cache evicts within
/// each insert, moka in maintenance that runs behind a burst of inserts.
fn lag(backend: L1Backend) -> f64 {
    match backend {
        L1Backend::Moka => 1.0,
        _ => 0.0,
    }
}

/// A million distinct ids through one table: L1 stays bounded; prints peak RSS per backend.
#[derive(Debug, Parser)]
#[command(name = "storm")]
struct Args {
    /// Distinct ids to miss on, one get each.
    #[arg(long, default_value_t = 1_000_000)]
    ids: u64,

    /// The table's L1 capacity, the bound L1 must keep.
    #[arg(long, default_value_t = 10_000)]
    capacity: u64,

    /// Each value's size in bytes: with it, L1 is bounded by `--capacity-bytes` instead.
    #[arg(long)]
    value_bytes: Option<usize>,

    /// L1's byte budget, for `--value-bytes`.
    #[arg(long, default_value_t = 64 << 20)]
    capacity_bytes: u64,

    /// Run one backend in this process (the parent runs each in a child of its own).
    #[arg(long, value_enum, hide = true)]
    backend: Option<Backend>,
}

/// The L1 backend a child process runs.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Backend {
    #[value(name = "quick_cache")]
    QuickCache,
    Moka,
}

impl Backend {
    const ALL: [Backend; 2] = [Backend::QuickCache, Backend::Moka];

    fn l1(self) -> L1Backend {
        match self {
            Backend::QuickCache => L1Backend::QuickCache,
            Backend::Moka => L1Backend::Moka,
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Backend::QuickCache => "quick_cache",
            Backend::Moka => "moka",
        }
    }
}

/// Runs the storm on one backend in this process and prints one line of figures.
async fn storm(backend: L1Backend, ids: u64, capacity: u64) -> Result<bool, echostore::Error> {
    let before = peak_rss_kib().unwrap_or(0);
    let store = Store::builder().build().await?;
    let table = store
        .table::<u64, u64>("storm")
        .l1_backend(backend)
        .l1_capacity(capacity as usize)
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(id) })
        .build()
        .await?;
    let (elapsed, s) = run(&table, ids).await?;
    let peak = peak_rss_kib().unwrap_or(0);
    println!(
        "{backend:?}: {ids} distinct ids in {:.2} s ({:.0} misses/s) · source reads {} · L1 {} of {capacity} · in flight {} · peak RSS {:.1} MiB (before the storm {:.1} MiB)",
        elapsed.as_secs_f64(),
        ids as f64 / elapsed.as_secs_f64(),
        s.source_reads,
        s.l1_len,
        s.in_flight,
        peak as f64 / 1024.0,
        before as f64 / 1024.0,
    );
    Ok(s.l1_len <= capacity && s.in_flight == 0 && s.source_reads == ids)
}

/// The storm with values of `value_bytes` bytes each and L1 bounded by `budget` bytes: the peak
/// RSS stays within the budget (and [`lag`]'s more for moka) and [`RSS_ALLOWANCE_MIB`].
async fn storm_bytes(
    backend: L1Backend,
    ids: u64,
    value_bytes: usize,
    budget: u64,
) -> Result<bool, echostore::Error> {
    let before = peak_rss_kib().unwrap_or(0);
    let store = Store::builder().build().await?;
    let table = store
        .table::<u64, Vec<u8>>("storm")
        .l1_backend(backend)
        .l1_capacity_bytes(budget)
        .l1_weigher(|_: &u64, value: &Vec<u8>| value.len() as u64)
        .loader(move |id: u64| async move { Ok::<_, std::io::Error>(vec![id as u8; value_bytes]) })
        .build()
        .await?;
    let (elapsed, s) = run(&table, ids).await?;
    let peak_mib = peak_rss_kib().unwrap_or(0) as f64 / 1024.0;
    let budget_mib = budget as f64 / (1 << 20) as f64;
    let allowed_mib = budget_mib * (1.0 + lag(backend)) + RSS_ALLOWANCE_MIB;
    let loaded_mib = (ids as f64 * value_bytes as f64) / (1 << 20) as f64;
    println!(
        "{backend:?}: {ids} distinct ids of {value_bytes} B ({loaded_mib:.0} MiB loaded) in {:.2} s · L1 {} entries ({:.1} MiB of values, budget {budget_mib:.0} MiB) · in flight {} · peak RSS {peak_mib:.1} MiB (before the storm {:.1} MiB; allowed {:.0} MiB)",
        elapsed.as_secs_f64(),
        s.l1_len,
        (s.l1_len as f64 * value_bytes as f64) / (1 << 20) as f64,
        s.in_flight,
        before as f64 / 1024.0,
        allowed_mib,
    );
    let within = s.l1_len * value_bytes as u64 <= budget;
    Ok(within && peak_mib <= allowed_mib && s.in_flight == 0 && s.source_reads == ids)
}

/// One get of every id, from 16 streams at once; the time and the counters after.
async fn run<V: echostore::Value>(
    table: &echostore::Table<u64, V>,
    ids: u64,
) -> Result<(std::time::Duration, echostore::TableStats), echostore::Error> {
    let started = Instant::now();
    let streams: Vec<_> = (0..16u64)
        .map(|s| {
            let table = table.clone();
            tokio::spawn(async move {
                for id in (s..ids).step_by(16) {
                    table.get(&id).await?;
                }
                Ok::<_, echostore::Error>(())
            })
        })
        .collect();
    for stream in streams {
        stream.await.map_err(|_| echostore::Error::Stopped)??;
    }
    let elapsed = started.elapsed();
    // A flight answers on its own task; its owner ends it a moment later.
    while table.stats().in_flight > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    Ok((elapsed, table.stats()))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let Some(backend) = args.backend else {
        // The parent: one child process per backend.
        let me = std::env::current_exe().expect("own path");
        let mut ok = true;
        for backend in Backend::ALL {
            let status = Command::new(&me)
                .args(["--backend", backend.flag()])
                .args(["--ids", &args.ids.to_string()])
                .args(["--capacity", &args.capacity.to_string()])
                .args(["--capacity-bytes", &args.capacity_bytes.to_string()])
                .args(args.value_bytes.map(|n| format!("--value-bytes={n}")))
                .status();
            ok &= status.is_ok_and(|s| s.success());
        }
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    };
    let (backend, ids, capacity) = (backend.l1(), args.ids, args.capacity);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let ran = match args.value_bytes {
        None => runtime.block_on(storm(backend, ids, capacity)),
        Some(value_bytes) => {
            runtime.block_on(storm_bytes(backend, ids, value_bytes, args.capacity_bytes))
        }
    };
    match ran {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("{backend:?}: a bound did not hold");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{backend:?}: {e}");
            ExitCode::FAILURE
        }
    }
}
