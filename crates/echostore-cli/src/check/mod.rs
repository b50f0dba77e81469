//! `echostore check`: the consistency model of `docs/consistency.md`, verified across OS
//! processes under faults.
//!
//! The controller lays down a versioned source of truth ([`source`]), starts `--processes`
//! workers ([`worker`], each its own process with its own store) against one Valkey, injects the
//! chosen [`faults`] on a schedule while the workers make gets, puts and invalidates, then merges
//! every worker's history ([`history`]) and checks it against the model ([`model`]); the
//! [`report`] adds a few [`figures`] no rule judges (source reads during an outage, how long a
//! failed write left older versions read). The verdict fails on any violation; `--coherence off` with writes across processes must fail, which
//! `--expect fail` turns into the check's own self-test.

use std::time::Duration;

use clap::{Args, ValueEnum};
use echostore_testkit::{Proxy, duration};
use embedded_valkey::EmbeddedValkey;
use rand::Rng;

pub(crate) use crate::coherence::{Mode, Switch};
use crate::{CliResult, Outcome};
use faults::{Fault, Reach};
use history::{FaultSpan, Op};
use model::Bounds;
use report::Report;

mod faults;
mod figures;
mod history;
mod model;
mod report;
mod source;
pub(crate) mod worker;
mod workers;

/// How long the workers run before the first fault.
const WARM_UP: Duration = Duration::from_secs(1);

/// The least time between the starts of two faults.
const FAULT_SPACING: Duration = Duration::from_secs(2);

/// The margin taken off a value's fresh life before a second load counts as extra: the span
/// between a load's end and its value landing on Valkey.
const FRESH_MARGIN: Duration = Duration::from_millis(100);

/// The verdict a run is expected to reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Verdict {
    Pass,
    Fail,
}

/// Flags of `echostore check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Worker processes sharing the one Valkey.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=64))]
    processes: u32,

    /// How long the workers run: seconds (`30`) or a duration (`1m`).
    #[arg(long, default_value = "30", value_parser = seconds)]
    seconds: Duration,

    /// Faults to inject, in turn: none, all, or a comma-separated list of kill-tracking,
    /// kill-all, pause-write, pause-all, restart, outage, crash, proxy, skew (`kill` and
    /// `pause` name both).
    #[arg(long, default_value = "none", value_parser = faults::FaultList::parse)]
    faults: faults::FaultList,

    /// Whether the workers' stores keep their L1 coherent (off: the check must fail).
    #[arg(long, value_enum, default_value_t = Switch::On)]
    coherence: Switch,

    /// How the workers' coherence learns of changes: every change under a table's prefix
    /// (broadcast), or only those of the keys each store read (keys).
    #[arg(long, value_enum, default_value_t = Mode::Broadcast)]
    tracking: Mode,

    /// Ids per table.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    keys: u32,

    /// Concurrent callers per worker.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    tasks: u32,

    /// Percent of calls that are reads; the writes are puts and invalidates, 18 to 7, and one in
    /// 200 invalidates a tag or clears the table (recorded as an invalidate of each id it covers).
    #[arg(long, default_value_t = 75, value_parser = clap::value_parser!(u32).range(0..=100))]
    reads: u32,

    /// The tables' ttl (and stale window).
    #[arg(long, default_value = "3s", value_parser = duration::parse)]
    ttl: Duration,

    /// How long one source read takes.
    #[arg(long, default_value = "2ms", value_parser = duration::parse)]
    source_latency: Duration,

    /// How long the workers' L1 keeps what Valkey could not confirm (`unconfirmed_l1_life`).
    #[arg(long, default_value = "1s", value_parser = duration::parse)]
    unconfirmed_l1_life: Duration,

    /// B: how long after a write returned a read in another process may still miss it.
    #[arg(long, default_value = "100ms", value_parser = duration::parse)]
    bound: Duration,

    /// How long after a fault ends its effects on staleness and source reads are excused
    /// (default: `--unconfirmed-l1-life` plus 1 s to notice the loss and reconnect, and at
    /// least 2 s).
    #[arg(long, value_parser = duration::parse)]
    fault_grace: Option<Duration>,

    /// Exit 0 only if the verdict is this one (`fail`: the checker's self-test).
    #[arg(long, value_enum)]
    expect: Option<Verdict>,

    /// Keep the run's directory (the workers' histories, one JSON line per call, and their
    /// stderr) and print where it is.
    #[arg(long)]
    keep: bool,

    /// Print one JSON object instead of the readout.
    #[arg(long)]
    json: bool,
}

/// Runs the check and prints its report.
pub(crate) async fn run(url: Option<&str>, args: &CheckArgs) -> CliResult<Outcome> {
    let mut embedded = match url {
        Some(_) => None,
        None => Some(
            tokio::task::spawn_blocking(EmbeddedValkey::start)
                .await
                .map_err(|e| format!("starting an embedded Valkey: {e}"))?
                .map_err(|e| format!("cannot start an embedded Valkey: {e}"))?,
        ),
    };
    let url = match url {
        Some(url) => url.to_owned(),
        None => embedded
            .as_ref()
            .map(EmbeddedValkey::url)
            .ok_or("no Valkey to check against")?,
    };
    let dir = tempfile::Builder::new()
        .prefix("echostore-check-")
        .tempdir()?;
    source::Source::create(dir.path(), worker::TABLES.len() as u8, args.keys)?;

    let mut skipped = Vec::new();
    let faults: Vec<Fault> = args
        .faults
        .0
        .iter()
        .copied()
        .filter(|f| match faults::unavailable(*f, embedded.is_some()) {
            Some(why) => {
                skipped.push((f.name().to_owned(), why.to_owned()));
                false
            }
            None => true,
        })
        .collect();
    let proxy = match faults.contains(&Fault::Proxy) {
        true => Some(Proxy::bind(&url).await?),
        false => None,
    };

    let namespace = format!("check-{:016x}", rand::rng().random::<u64>());
    let seed: u64 = rand::rng().random();
    let worker_args: Vec<worker::WorkerArgs> = (0..args.processes)
        .map(|process| worker::WorkerArgs {
            process,
            dir: dir.path().to_owned(),
            namespace: namespace.clone(),
            keys: args.keys,
            tasks: args.tasks,
            reads: args.reads,
            ttl: args.ttl,
            source_latency: args.source_latency,
            unconfirmed_l1_life: args.unconfirmed_l1_life,
            coherence: args.coherence,
            tracking: args.tracking,
            seed,
        })
        .collect();
    // Worker 0 reaches Valkey through the proxy when the proxy fault is on.
    let urls: Vec<String> = (0..args.processes)
        .map(|p| match (&proxy, p) {
            (Some(proxy), 0) => proxy.url(),
            _ => url.clone(),
        })
        .collect();
    let mut workers = workers::Workers::spawn(&urls, &worker_args, dir.path())?;
    workers.ready().await?;

    let spans = {
        let mut reach = Reach {
            url: &url,
            embedded: embedded.as_mut(),
            workers: &mut workers,
            proxy: proxy.as_ref(),
            next_crash: 0,
            next_skew: 1,
        };
        schedule(&faults, args.seconds, &mut reach, &mut skipped).await?
    };
    workers.stop().await?;
    let ops = histories(dir.path(), args.processes)?;

    let jitter = 0.1; // the tables keep the default jitter
    let fresh_for = args.ttl.mul_f64(1.0 - jitter).saturating_sub(FRESH_MARGIN);
    let bounds = Bounds {
        staleness: args.bound.as_nanos() as u64,
        fault_grace: args.grace().as_nanos() as u64,
        fresh_for: fresh_for.as_nanos() as u64,
    };
    let findings = model::check(&ops, &spans, bounds);
    if args.keep {
        let kept = dir.keep();
        std::fs::write(kept.join("faults.json"), serde_json::to_string(&spans)?)?;
        eprintln!("check: the run's histories are in {}", kept.display());
    }
    let report = Report::new(args, &ops, &spans, skipped, findings);
    if args.json {
        crate::output::print_json(&report)?;
    } else {
        report.print();
    }
    let wanted = args.expect.unwrap_or(Verdict::Pass);
    Ok(match report.verdict() == wanted {
        true => Outcome::Held,
        false => Outcome::Failed,
    })
}

impl CheckArgs {
    /// How long after a fault its effects are excused: what L1 keeps unconfirmed, and a second
    /// to notice the loss and reconnect (at least 2 s: a store's reconnect backoff and breaker
    /// cooldown after a long outage), unless `--fault-grace` says otherwise.
    fn grace(&self) -> Duration {
        self.fault_grace.unwrap_or(
            (self.unconfirmed_l1_life + Duration::from_secs(1)).max(Duration::from_secs(2)),
        )
    }
}

/// Runs the workers for `seconds`, injecting `faults` in turn from [`WARM_UP`] on, spaced evenly
/// (at least [`FAULT_SPACING`] apart, and at least that long after the previous fault ended). A
/// fault the server refuses is skipped and said so.
async fn schedule(
    faults: &[Fault],
    seconds: Duration,
    reach: &mut Reach<'_>,
    skipped: &mut Vec<(String, String)>,
) -> CliResult<Vec<FaultSpan>> {
    let begun = tokio::time::Instant::now();
    let end = begun + seconds;
    let mut spans = Vec::new();
    if faults.is_empty() {
        tokio::time::sleep_until(end).await;
        return Ok(spans);
    }
    let slots = (seconds.saturating_sub(WARM_UP).as_secs_f64() / FAULT_SPACING.as_secs_f64())
        .floor()
        .max(1.0) as usize;
    let rounds = slots.div_ceil(faults.len()).max(1);
    let spacing = seconds.saturating_sub(WARM_UP) / (faults.len() * rounds) as u32;
    let mut next = begun + WARM_UP;
    for fault in faults.iter().cycle().take(faults.len() * rounds) {
        tokio::time::sleep_until(next).await;
        if tokio::time::Instant::now() >= end {
            break;
        }
        match faults::inject(*fault, reach).await {
            Ok(span) => spans.push(span),
            Err(e) => {
                if !skipped.iter().any(|(name, _)| name == fault.name()) {
                    skipped.push((fault.name().to_owned(), e.to_string()));
                }
            }
        }
        // A long fault (an outage) pushes the next one out: the run keeps a healthy stretch
        // between faults, where the rules apply unexcused.
        next = (next + spacing).max(tokio::time::Instant::now() + FAULT_SPACING);
    }
    tokio::time::sleep_until(end).await;
    Ok(spans)
}

/// Every worker's history, merged.
fn histories(dir: &std::path::Path, processes: u32) -> CliResult<Vec<Op>> {
    let mut ops = Vec::new();
    for p in 0..processes {
        let path = dir.join(format!("history-{p}.jsonl"));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        for line in text.lines() {
            let op: Op = serde_json::from_str(line)
                .map_err(|e| format!("{}: a line that is no operation: {e}", path.display()))?;
            ops.push(op);
        }
    }
    Ok(ops)
}

/// A plain number of seconds, or a duration with its unit.
fn seconds(text: &str) -> Result<Duration, String> {
    match text.parse::<u64>() {
        Ok(n) => Ok(Duration::from_secs(n)),
        Err(_) => duration::parse(text),
    }
}
