//! The million-id storm, measured: 1,000,000 misses on distinct ids through one table (no Valkey,
//! so the figure is EchoStore's own memory), for each L1 backend, with the peak resident set size
//! (`VmHWM`) before and after. L1 is bounded by `--capacity`; the flights map must be empty at
//! the end.
//!
//! ```text
//! cargo run --release -p echostore-benches --bin storm -- [--ids 1000000] [--capacity 10000]
//! ```
//!
//! Each backend runs in a fresh process (this binary re-runs itself), so one run's peak does not
//! hide the other's.

use std::process::{Command, ExitCode};
use std::time::Instant;

use echostore::{L1Backend, Store};

/// A `/proc/self/status` field in KiB (`VmHWM`: peak RSS; `VmRSS`: now).
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

/// Runs the storm on one backend in this process and prints one line of figures.
async fn storm(backend: L1Backend, ids: u64, capacity: u64) -> Result<bool, echostore::Error> {
    let before = status_kib("VmHWM:");
    let store = Store::builder().build().await?;
    let table = store
        .table::<u64, u64>("storm")
        .l1_backend(backend)
        .l1_capacity(capacity as usize)
        .loader(|id: u64| async move { Ok::<_, std::io::Error>(id) })
        .start()
        .await?;
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
    let s = table.stats();
    let peak = status_kib("VmHWM:");
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

fn main() -> ExitCode {
    let (ids, capacity) = (arg("--ids", 1_000_000), arg("--capacity", 10_000));
    let backend = match std::env::args()
        .skip_while(|a| a != "--backend")
        .nth(1)
        .as_deref()
    {
        Some("quick_cache") => L1Backend::QuickCache,
        Some("moka") => L1Backend::Moka,
        _ => {
            // The parent: one child process per backend.
            let me = std::env::current_exe().expect("own path");
            let mut ok = true;
            for name in ["quick_cache", "moka"] {
                let status = Command::new(&me)
                    .args([
                        "--backend",
                        name,
                        "--ids",
                        &ids.to_string(),
                        "--capacity",
                        &capacity.to_string(),
                    ])
                    .status();
                ok &= status.is_ok_and(|s| s.success());
            }
            return if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(storm(backend, ids, capacity)) {
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
