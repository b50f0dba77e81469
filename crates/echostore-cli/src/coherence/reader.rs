//! One reader of `echostore coherence`: a separate OS process (the `echostore` binary run with the
//! hidden `coherence-reader` subcommand) holding its own store and table, reading the one hot id
//! in a loop and telling the parent, on stdout, the instant it first sees each write.
//!
//! Its lines, one per event:
//!
//! ```text
//! ready                        the table is tracked and the id is in L1
//! seen <seq> <unix-ns>         the first read that returned write <seq> (or a later one)
//! stats <json>                 at the end (stdin closed): counters since `ready`
//! ```
//!
//! The reader reads on a thread of its own, outside the runtime's workers, pausing `--read-every`
//! between reads (a thread sleep, so a pause of 100 µs is 100 µs and not the runtime timer's
//! millisecond): the instant it reports is within one pause of the instant its L1 changed, and the
//! runtime's workers — the tracking connection, the owner — are left free for the pushes. With a
//! pause of 0 it spins, which on a machine with fewer cores than processes starves them.

use std::io::BufRead;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use echostore::{Origin, TableStats};
use serde::Serialize;

use super::{Mode, Switch, Tallies, coherence_table, tracked, unix_ns};
use crate::{CliResult, Outcome};

/// Flags of the hidden `echostore --valkey URL coherence-reader`.
#[derive(Debug, Args)]
pub(crate) struct ReaderArgs {
    /// The run's tag: the source key and the hot id are the run's own.
    #[arg(long)]
    run: String,

    /// The table's ttl.
    #[arg(long, value_parser = echostore_testkit::duration::parse)]
    ttl: Duration,

    /// Whether this reader's store keeps its L1 coherent.
    #[arg(long, value_enum)]
    coherence: Switch,

    /// How this reader's store tracks.
    #[arg(long, value_enum)]
    tracking: Mode,

    /// Pause between reads (0: spin).
    #[arg(long, value_parser = echostore_testkit::duration::parse)]
    read_every: Duration,
}

/// What a reader says at the end, on its `stats` line.
#[derive(Debug, Serialize, serde::Deserialize, Clone, Copy, Default)]
pub(crate) struct ReaderStats {
    /// `fetch` calls in the loop.
    pub(crate) reads: u64,
    /// Where they were answered from.
    pub(crate) origins: Tallies,
    /// Reads that returned an older write than one already seen (a stale copy): must be 0.
    pub(crate) went_back: u64,
    /// The newest write seen.
    pub(crate) last_seq: u64,
    /// The table's counters, from `ready` to the end.
    pub(crate) invalidations: u64,
    pub(crate) coherence_flushes: u64,
    pub(crate) l1_hits: u64,
    pub(crate) l2_hits: u64,
    pub(crate) source_reads: u64,
    pub(crate) push_wakeups: u64,
    pub(crate) poll_waits: u64,
}

/// Runs one reader until its stdin closes.
pub(crate) async fn run(url: &str, args: &ReaderArgs) -> CliResult<Outcome> {
    let (store, table) =
        coherence_table(url, &args.run, args.ttl, args.coherence, args.tracking).await?;
    if args.coherence == Switch::On {
        tracked(&table, url).await?;
    }
    let id = super::hot_id(&args.run);
    let first = table.get(&id).await?;
    println!("ready");

    // The parent closes our stdin to end the run.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                if line.is_err() {
                    break;
                }
            }
            stop.store(true, Ordering::Release);
        });
    }

    let before = table.stats();
    let (runtime, pause, reader) = (
        tokio::runtime::Handle::current(),
        args.read_every,
        table.clone(),
    );
    let mut out = tokio::task::spawn_blocking(move || -> CliResult<ReaderStats> {
        let mut out = ReaderStats {
            last_seq: first.seq,
            ..ReaderStats::default()
        };
        while !stop.load(Ordering::Acquire) {
            let fetched = runtime.block_on(reader.fetch(&id))?;
            let at = unix_ns();
            out.reads += 1;
            out.origins.count(fetched.origin);
            let seq = fetched.value.seq;
            if seq > out.last_seq {
                out.last_seq = seq;
                println!("seen {seq} {at}");
            } else if seq < out.last_seq {
                out.went_back += 1;
            }
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
        }
        Ok(out)
    })
    .await
    .map_err(|e| format!("the read loop failed: {e}"))??;
    let delta = since(before, table.stats());
    out.invalidations = delta.invalidations;
    out.coherence_flushes = delta.coherence_flushes;
    out.l1_hits = delta.l1_hits;
    out.l2_hits = delta.l2_hits;
    out.source_reads = delta.source_reads;
    out.push_wakeups = delta.push_wakeups;
    out.poll_waits = delta.poll_waits;
    println!("stats {}", serde_json::to_string(&out)?);
    drop(table);
    drop(store);
    Ok(Outcome::Held)
}

/// The counters that moved between two snapshots (the ones the readout reports).
pub(crate) fn since(before: TableStats, after: TableStats) -> TableStats {
    let mut delta = after;
    delta.l1_hits -= before.l1_hits;
    delta.l2_hits -= before.l2_hits;
    delta.source_reads -= before.source_reads;
    delta.invalidations -= before.invalidations;
    delta.coherence_flushes -= before.coherence_flushes;
    delta.push_wakeups -= before.push_wakeups;
    delta.poll_waits -= before.poll_waits;
    delta
}

impl Tallies {
    /// Counts one answer by its origin.
    pub(crate) fn count(&mut self, origin: Origin) {
        match origin {
            Origin::L1 => self.l1 += 1,
            Origin::L2 => self.l2 += 1,
            Origin::Loaded => self.loaded += 1,
            Origin::Coalesced => self.coalesced += 1,
            _ => self.other += 1,
        }
    }
}
