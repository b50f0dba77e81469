//! The cost of coherence, measured against the number of tracking connections: for each tracking
//! mode, connection count, write rate and key-set size, one writer sets keys at a paced rate while
//! `n` RESP3 connections track them, and the bench reads what the write cost Valkey (server CPU
//! from `INFO cpu`, output bytes from `INFO stats`, the calls from `INFO commandstats`), what the
//! tracking connections received (pushes, their RESP3 bytes), and the coherence lag (a write's
//! reply to its push at a tracking connection).
//!
//! The two modes:
//! - `bcast` — `CLIENT TRACKING ON BCAST PREFIX t: PREFIX lock:t:`, as the library's tracking
//!   connection: every write under the prefix is pushed to every connection.
//! - `default` — `CLIENT TRACKING ON`: Valkey remembers which keys each connection read, and pushes
//!   a write only to the connections that read the key since its last invalidation.
//!
//! Each connection holds `--held` keys of the key set (its L1): it reads them once, and after an
//! invalidation of one of them reads it again (the refill a next L1 miss would do). Both modes
//! refill the same keys, so the difference between them is the tracking's own cost. With
//! `--held` at or above the key-set size every connection holds every key, which is the default
//! mode's worst case: it pushes to every connection, as BCAST does.
//!
//! ```text
//! cargo run --release -p echostore-benches --bin scale_bench -- [--conns 0,1,2,4,8,16,64,256]
//!     [--rates 500,2000] [--keys 1000,100000] [--held 1000] [--seconds 2] [--out docs/scale/measured.csv]
//! ```
//!
//! Writes a CSV row per cell to `--out`, a table to stdout, and the plots of docs/scale.md beside
//! the CSV.
//!
//! Layout: [`cell`] measures one configuration; [`tracking`] is a tracking connection and what it
//! receives; [`writes`] the paced writer and the lag of its pushes; [`fleet`] the separate OS
//! processes; [`report`] the table, the CSV and the plots.

mod cell;
mod fleet;
mod report;
mod tracking;
mod writes;

use std::time::Duration;

use clap::{Parser, ValueEnum};
use embedded_valkey::EmbeddedValkey;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use cell::Cell;

/// Valkey's cost per write against the number of tracking connections, per tracking mode.
#[derive(Debug, Parser)]
#[command(name = "scale_bench")]
struct Args {
    /// Tracking connection counts, comma-separated (0: the write's own cost, for the baseline).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8,16,64,256")]
    conns: Vec<usize>,

    /// Write rates (writes per second), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "500,2000")]
    rates: Vec<u32>,

    /// Key-set sizes, comma-separated; writes pick a key uniformly.
    #[arg(long, value_delimiter = ',', default_value = "1000,100000")]
    keys: Vec<u32>,

    /// Keys each tracking connection holds (reads, and refills after an invalidation).
    #[arg(long, default_value_t = 1000)]
    held: u32,

    /// Seconds of writes per cell.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,

    /// Modes to measure.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "bcast,default"
    )]
    modes: Vec<Mode>,

    /// The CSV to write.
    #[arg(long, default_value = "docs/scale/measured.csv")]
    out: String,

    /// Seeds the key choice and each connection's held keys.
    #[arg(long, default_value_t = 22)]
    seed: u64,

    /// Fleets of OS processes (one tracking connection each) to measure as well, comma-separated.
    /// Empty for none.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    procs: Vec<usize>,

    /// Run as one process of such a fleet, tracking the Valkey at this URL (for the parent).
    #[arg(long, hide = true)]
    child_of: Option<String>,
}

/// A tracking mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// `BCAST` with the table's prefixes: every write to every connection.
    Bcast,
    /// Key tracking: a write to the connections that read the key.
    Default,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Bcast => "bcast",
            Mode::Default => "default",
        }
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = match args.child_of.clone() {
        Some(url) => runtime.block_on(fleet::child(url, args)),
        None => runtime.block_on(run(args)),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scale_bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let valkey = EmbeddedValkey::start().map_err(|e| format!("cannot start Valkey: {e}"))?;
    let url = valkey.url();
    let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
    let mut control = client
        .get_multiplexed_async_connection_with_config(&patient())
        .await
        .map_err(|e| e.to_string())?;
    if let Some(dir) = std::path::Path::new(&args.out).parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut csv = format!("{}\n", report::CSV_HEADER);
    let mut cells = Vec::new();
    report::print_header();
    for &keys in &args.keys {
        for &rate in &args.rates {
            for &mode in &args.modes {
                for &conns in &args.conns {
                    let cell = Cell {
                        mode,
                        conns,
                        procs: 1,
                        rate,
                        keys,
                        held: args.held.min(keys),
                    };
                    measure_into(&client, &mut control, cell, &args, &mut csv, &mut cells).await?;
                }
                for &procs in args.procs.iter().filter(|&&p| p > 1) {
                    let cell = Cell {
                        mode,
                        conns: procs,
                        procs,
                        rate,
                        keys,
                        held: args.held.min(keys),
                    };
                    measure_into(&client, &mut control, cell, &args, &mut csv, &mut cells).await?;
                }
            }
        }
    }
    let dir = std::path::Path::new(&args.out)
        .parent()
        .unwrap_or(".".as_ref());
    report::plot(&cells, dir)?;
    println!("\nwritten: {} and the plots beside it", args.out);
    drop(valkey);
    Ok(())
}

/// A connection config that waits for replies as long as a loaded machine may need: redis-rs's
/// default response timeout is shorter than a busy cell's `INFO` or `FLUSHALL` can take.
fn patient() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)))
}

/// Measures one cell and adds its row to `csv`, written out at once so that a long run keeps
/// what it has measured, and to `cells` for the plots; a cell that fails is reported and skipped.
async fn measure_into(
    client: &redis::Client,
    control: &mut MultiplexedConnection,
    cell: Cell,
    args: &Args,
    csv: &mut String,
    cells: &mut Vec<(Cell, cell::Row)>,
) -> Result<(), String> {
    match cell::measure(client, control, cell, args).await {
        Ok(row) => {
            report::print_row(cell, &row);
            report::csv_row(csv, cell, args.seconds, &row);
            cells.push((cell, row));
            std::fs::write(&args.out, &*csv).map_err(|e| format!("{}: {e}", args.out))
        }
        Err(e) => {
            eprintln!(
                "{} {} conns, {} procs: skipped: {e}",
                cell.mode.name(),
                cell.conns,
                cell.procs
            );
            Ok(())
        }
    }
}
