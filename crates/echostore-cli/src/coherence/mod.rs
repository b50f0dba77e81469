//! The coherence readout (`echostore coherence`): how long a write in one process takes to reach
//! the L1 of every other process, and what keeping L1 coherent costs.
//!
//! The parent holds the **writer**: a store with one table and one hot id. It starts `--readers`
//! **reader processes** (this binary, hidden subcommand `coherence-reader`, see [`reader`]), each
//! with its own store and the same table, all on one Valkey. Each reader loads the id into its L1
//! and then reads it in a loop, pausing `--read-every` (100 µs) between reads. The writer makes `--writes` writes, alternating
//! a `put` of the new value and an `invalidate` (the source changed, drop the cached copy), and
//! numbers them: before write `n` it sets the source (a Valkey key outside the table's prefixes)
//! to `n`, so a `put` stores `n` and a reload after an `invalidate` reads `n`.
//!
//! **The lag.** The writer notes the wall-clock instant just before it calls `put`/`invalidate`;
//! a reader notes the instant of the first read that returns `n` (a read after an invalidation
//! returns `n` only once reloaded). All processes run on one machine, so one clock serves both.
//! The writer waits until every reader has seen `n`, pauses `--gap` (readers keep hitting L1
//! meanwhile), then makes write `n + 1`: every lag is measured, none is skipped.
//!
//! With `--coherence off` a reader sees a write only when its L1 copy expires, so the lag is up
//! to the ttl (1 s by default in that mode) and `--max-run` caps the run.
//!
//! **The self-push.** Valkey also pushes the writer's own writes back to it, which drops the copy
//! it just `put` into its L1: after each `put` (and its push) the writer reads the id once and the
//! readout counts where that read was answered (L2 with coherence on, L1 without).

use std::time::Duration;

use clap::{Args, ValueEnum};
use echostore::{LoserPolicy, Store, Table};
use echostore_testkit::measure::Latencies;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::output::{self, Spinner};
use crate::valkey::Target;
use crate::{CliResult, Outcome};
use readers::{Event, Readers};
use report::{CoherenceReport, Run, Write};

pub(crate) mod reader;
mod readers;
mod report;

/// The table every process of the readout opens.
const TABLE: &str = "coherence";

/// How long the readers may take to start, be tracked and load the id.
const START_WITHIN: Duration = Duration::from_secs(30);

/// How long past the ttl a write may take to reach every reader before the readout gives up.
const SEEN_SLACK: Duration = Duration::from_secs(10);

/// Flags of `echostore coherence`.
#[derive(Debug, Args)]
pub(crate) struct CoherenceArgs {
    /// Writes to make, alternating put and invalidate.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    writes: u64,

    /// Reader processes, each with its own store.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    readers: u32,

    /// Keep the L1s coherent through Valkey's invalidation pushes, or not (the comparison).
    #[arg(long, value_enum, default_value_t = Switch::On)]
    coherence: Switch,

    /// How the stores' coherence learns of changes: every change under the table's prefix
    /// (broadcast), or only those of the keys each store read (keys).
    #[arg(long, value_enum, default_value_t = Mode::Broadcast)]
    tracking: Mode,

    /// The table's ttl [default: 60s with coherence on, 1s with it off].
    #[arg(long, value_parser = echostore_testkit::duration::parse)]
    ttl: Option<Duration>,

    /// Pause after every reader has seen a write, before the next one.
    #[arg(long, default_value = "10ms", value_parser = echostore_testkit::duration::parse)]
    gap: Duration,

    /// Each reader's pause between reads (0: spin, which starves a machine with fewer cores
    /// than processes).
    #[arg(long, default_value = "100us", value_parser = echostore_testkit::duration::parse)]
    read_every: Duration,

    /// Stop writing after this long (with coherence off a write takes up to the ttl to be seen).
    #[arg(long, default_value = "30s", value_parser = echostore_testkit::duration::parse)]
    max_run: Duration,

    /// Print one JSON object instead of the readout.
    #[arg(long)]
    json: bool,
}

impl CoherenceArgs {
    fn ttl(&self) -> Duration {
        self.ttl.unwrap_or(match self.coherence {
            Switch::On => Duration::from_secs(60),
            Switch::Off => Duration::from_secs(1),
        })
    }
}

/// Coherence on or off, as chosen on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Switch {
    /// Every store holds a tracking connection; pushes drop changed ids from L1.
    On,
    /// No tracking: an L1 copy lives its ttl whatever other processes write.
    Off,
}

impl Switch {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Switch::On => "on",
            Switch::Off => "off",
        }
    }
}

/// How the stores' coherence learns of changes (`echostore::Tracking`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    /// Every change under a table's prefix pushed to every store (`BCAST`).
    Broadcast,
    /// Only the changes of the keys a store read (Valkey's default tracking mode).
    Keys,
}

impl Mode {
    pub(crate) fn tracking(self) -> echostore::Tracking {
        match self {
            Mode::Broadcast => echostore::Tracking::Broadcast,
            Mode::Keys => echostore::Tracking::Keys,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        self.tracking().name()
    }
}

/// What the table caches: the number of the write that produced it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Stamp {
    pub(crate) seq: u64,
}

/// Answers counted by their origin.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct Tallies {
    pub(crate) l1: u64,
    pub(crate) l2: u64,
    pub(crate) loaded: u64,
    pub(crate) coalesced: u64,
    pub(crate) other: u64,
}

/// The hot id of a run.
pub(crate) fn hot_id(run: &str) -> String {
    format!("hot-{run}")
}

/// The source of a run: a Valkey key outside every table prefix, so writing it pushes nothing.
fn source_key(run: &str) -> String {
    format!("coherence-source:{run}")
}

/// Now, as Unix time in nanoseconds: the one clock every process of the run shares.
pub(crate) fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A store and the readout's table on `url`, whose loader reads the run's source.
pub(crate) async fn coherence_table(
    url: &str,
    run: &str,
    ttl: Duration,
    coherence: Switch,
    tracking: Mode,
) -> CliResult<(Store, Table<String, Stamp>)> {
    let store = Store::builder()
        .valkey(url)
        .require_valkey(true)
        .coherence(coherence == Switch::On)
        .tracking(tracking.tracking())
        .build()
        .await?;
    let source = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let key = source_key(run);
    let table = store
        .table::<String, Stamp>(TABLE)
        .ttl(ttl)
        .jitter(0.0)
        .losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_secs(10),
        })
        .loader(move |_id: String| {
            let (mut source, key) = (source.clone(), key.clone());
            async move {
                let seq: Option<u64> = source.get(&key).await?;
                Ok::<_, redis::RedisError>(Stamp {
                    seq: seq.unwrap_or(0),
                })
            }
        })
        .build()
        .await?;
    Ok((store, table))
}

/// Waits until Valkey's pushes reach `table`. The probe is put through the table first: under key
/// tracking Valkey pushes only the keys the store read, which the put's confirmation does.
pub(crate) async fn tracked(table: &Table<String, Stamp>, url: &str) -> CliResult<()> {
    let id = format!("probe-{}", std::process::id());
    table.put(&id, Stamp { seq: 0 }).await?;
    let probe = format!("{TABLE}:{{{id}}}");
    crate::valkey::until_pushed(url, &probe, || table.stats().invalidations).await
}

/// Runs the readout and prints it.
pub(crate) async fn run(target: &Target, args: &CoherenceArgs) -> CliResult<Outcome> {
    output::readout(
        args.json,
        "coherence: starting the readers",
        async |spinner| measure(target, args, spinner).await,
        |report| report::print_human(report, target),
        |report| report.invariant_held,
    )
    .await
}

async fn measure(
    target: &Target,
    args: &CoherenceArgs,
    spinner: &Spinner,
) -> CliResult<CoherenceReport> {
    let run = format!("{:016x}", rand::random::<u64>());
    let (ttl, url, id) = (args.ttl(), target.url(), hot_id(&run));
    let mut source = target.connect().await?;
    let _: () = source.set(source_key(&run), 0).await?;
    let (store, table) = coherence_table(url, &run, ttl, args.coherence, args.tracking).await?;
    if args.coherence == Switch::On {
        tracked(&table, url).await?;
    }
    table.get(&id).await?;

    let n = args.readers as usize;
    let mut readers = Readers::spawn(
        n,
        url,
        &run,
        ttl,
        (args.coherence, args.tracking),
        args.read_every,
    )?;
    let ready_by = Instant::now() + START_WITHIN;
    let mut ready = 0;
    while ready < n {
        match readers.next(ready_by, "the readers to start").await? {
            (_, Event::Ready) => ready += 1,
            (i, Event::Gone) => return Err(readers.why_gone(i).into()),
            _ => {}
        }
    }

    spinner.say("coherence: writing; the readers read in a loop");
    let writer_before = table.stats();
    let mut r = Run::new(n);
    let started = Instant::now();
    for seq in 1..=args.writes {
        if started.elapsed() >= args.max_run {
            r.capped = true;
            break;
        }
        let put = seq % 2 == 1;
        let _: () = source.set(source_key(&run), seq).await?;
        let issued_ns = unix_ns();
        if put {
            table.put(&id, Stamp { seq }).await?;
        } else {
            table.invalidate(&id).await?;
        }
        r.writes.push(Write { put, issued_ns });
        let seen_by = Instant::now() + ttl + SEEN_SLACK;
        while r.latest.iter().any(|&latest| latest < seq) {
            let what = format!("every reader to see write {seq}");
            match readers.next(seen_by, &what).await? {
                (i, Event::Seen { seq, at_ns }) => r.seen(i, seq, at_ns),
                (i, Event::Gone) => return Err(readers.why_gone(i).into()),
                _ => {}
            }
        }
        if put {
            self_read(&table, &id, &mut r).await?;
        }
        if !args.gap.is_zero() {
            tokio::time::sleep(args.gap).await;
        }
    }
    r.elapsed = started.elapsed();
    r.writer = reader::since(writer_before, table.stats());

    readers.stop();
    let stats_by = Instant::now() + START_WITHIN;
    while r.stats.iter().any(Option::is_none) {
        match readers.next(stats_by, "the readers' counters").await? {
            (i, Event::Stats(stats)) => r.stats[i] = Some(stats),
            (i, Event::Gone) if r.stats[i].is_none() => {
                return Err(readers.why_gone(i).into());
            }
            _ => {}
        }
    }
    readers.wait()?;
    // Leave nothing behind on the user's Valkey.
    table.invalidate(&id).await?;
    let _: () = source.del(source_key(&run)).await?;
    drop(table);
    drop(store);
    Ok(report::summarise(target, args, ttl, run, r))
}

/// The writer reads its id back right after its own `put`. Its own write also comes back to it as
/// a push, which the library recognises (docs/coherence.md, "The self-push"): the read should be
/// an L1 hit unless another write raced it.
async fn self_read(table: &Table<String, Stamp>, id: &String, r: &mut Run) -> CliResult<()> {
    let started = Instant::now();
    let fetched = table.fetch(id).await?;
    r.self_read_latency.record(started.elapsed());
    r.self_reads.count(fetched.origin);
    Ok(())
}

/// The lag histogram's upper bounds, in milliseconds; the last bucket is everything above.
pub(crate) const BUCKETS_MS: [f64; 9] = [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0, 1000.0, 10_000.0];

/// Latencies recorded from nanosecond spans.
pub(crate) fn record_ns(h: &mut Latencies, ns: u64) {
    h.record(Duration::from_nanos(ns));
}
