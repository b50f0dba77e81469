//! The soak: several stores (4 by default, standing in for 4 processes) share one embedded Valkey
//! and one table of hot keys with a short ttl, while random faults run for a minute: Valkey killed
//! and restarted empty, loader errors, loader panics, slow loads (a few outliving the regeneration
//! lock, a few cut off by the load timeout). At the end it checks that no waiter hung, that nothing
//! panicked outside the loader, that every flight landed (`in_flight == 0`), that every answer was
//! for the key asked, and that source reads per key per expiry window stayed at one — except where
//! a close pair of reads is explained by a failed load, a lock that expired mid-rebuild, a
//! fenced-out write or a Valkey outage; each explanation is counted and printed, and a pair that
//! none explains fails the soak. It prints the figures and exits 0 only if every check held.
//!
//! ```sh
//! cargo run --release -p echostore-benches --bin soak -- --seconds 60
//! ```
//!
//! It is not part of CI's default run. `docs/soak.md` describes the run and says exactly what
//! counts as an explained pair.
//!
//! - `args`: the command line (clap) — the load.
//! - `settings`: the library's timeouts, the fault odds and the check's tolerances.
//! - `source`: the loader every store reads; draws the faults, logs every read, sorts panics.
//! - `chaos`: Valkey killed and restarted; the windows in which each store could not use it.
//! - `load`: the stores, their workers and the run.
//! - `check`: close pairs of reads, each put in the bucket that explains it, or none.
//! - `report`: the figures, the stores' counters, and the verdict.
//! - this file: wiring, and the `--dump` CSV.

mod args;
mod chaos;
mod check;
mod load;
mod report;
mod settings;
mod source;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use clap::Parser;
use embedded_valkey::EmbeddedValkey;

use crate::args::Args;
use crate::chaos::{Chaos, Shared, run_chaos};
use crate::check::{Check, check_reads};
use crate::load::{Run, run_load, start_nodes};
use crate::report::{Verdict, ms, report};
use crate::source::{Read, Source, install_panic_hook};

fn main() -> ExitCode {
    // A usage error prints clap's message and exits with code 2.
    let args = Args::parse();
    install_panic_hook();
    match soak(&args) {
        Ok(verdict) => {
            println!();
            for (what, held) in &verdict.0 {
                println!("  [{}] {what}", if *held { "ok" } else { "FAILED" });
            }
            if verdict.passed() {
                println!("soak: PASS");
                ExitCode::SUCCESS
            } else {
                println!("soak: FAIL");
                ExitCode::FAILURE
            }
        }
        Err(why) => {
            eprintln!("soak: {why}");
            ExitCode::from(2)
        }
    }
}

/// Sets up, runs and checks; `Err` only when the soak could not run at all.
fn soak(args: &Args) -> Result<Verdict, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    // Dropped last (at the end of this function, also on an early return): kills the server.
    let mut valkey = EmbeddedValkey::start().map_err(|e| format!("cannot start Valkey: {e}"))?;
    let url = valkey.url();
    let t0 = Instant::now();
    let source = Arc::new(Source::new(t0, args.seed));
    let nodes = runtime
        .block_on(start_nodes(args, &url, &source))
        .map_err(|e| format!("cannot start the stores: {e}"))?;
    let shared = Shared {
        t0,
        stop_chaos: AtomicBool::new(false),
        restarts: AtomicU64::new(0),
    };
    eprintln!(
        "soak: {} stores × {} workers, {} keys, ttl {}, seed {}, {} s, Valkey at {url}",
        args.stores,
        args.workers,
        args.keys,
        ms(args.ttl),
        args.seed,
        args.run_for.as_secs_f64()
    );
    let (run, chaos) = std::thread::scope(|scope| {
        let chaos = scope.spawn(|| run_chaos(&mut valkey, &shared, args.seed));
        // Ends the chaos thread even if the run below panics, so that the scope can join it.
        let _stop = StopOnDrop(&shared.stop_chaos);
        let run = runtime.block_on(run_load(&nodes, args, &shared, &source));
        let chaos = chaos.join().unwrap_or_else(|_| Chaos {
            failure: Some("the chaos thread panicked".into()),
            ..Chaos::default()
        });
        (run, chaos)
    });
    let reads = source.take_reads();
    if let Some(path) = &args.dump {
        dump(path, &reads, &run, &chaos)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let check = Check::new(args.ttl, run.troubled.clone(), &chaos.outages, run.ran_for);
    let found = check_reads(reads.clone(), &check);
    Ok(report(args, &nodes, &run, &chaos, &reads, &check, &found))
}

/// Sets the flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

/// Writes the reads (and the windows the check used) as CSV: one line per read, then one per
/// window. Instants are microseconds since the start of the run.
fn dump(path: &std::path::Path, reads: &[Read], run: &Run, chaos: &Chaos) -> std::io::Result<()> {
    use std::io::Write;
    let us = |d: Duration| d.as_micros();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "kind,key_or_store,store,start_us,end_us,outcome,fault")?;
    for r in reads {
        writeln!(
            out,
            "read,{},{},{},{},{:?},{:?}",
            r.key,
            r.store,
            us(r.start),
            us(r.end),
            r.outcome,
            r.fault
        )?;
    }
    for o in &chaos.outages {
        let up = o.up.map_or(String::from("never"), |u| us(u).to_string());
        writeln!(out, "valkey_down,,,{},{up},,", us(o.down))?;
    }
    for (store, spans) in run.troubled.iter().enumerate() {
        for s in spans {
            writeln!(out, "troubled,,{store},{},{},,", us(s.from), us(s.to))?;
        }
    }
    out.flush()
}
