//! `echostore check`: the consistency model of `docs/consistency.md`, verified across OS
//! processes under faults.
//!
//! The controller lays down a versioned source of truth ([`source`]), starts `--processes`
//! workers ([`worker`], each its own process with its own store and [`tables`]) against one
//! Valkey or a local cluster ([`target`]), injects the chosen [`faults`] on a schedule while the
//! workers make the [`workload`]'s calls (single and batch reads, puts, invalidates, deletes,
//! group writes), then merges every worker's history ([`history`]) and checks it against the
//! model ([`model`]); the [`report`] adds a few [`figures`] no rule judges (source reads during an
//! outage, how long a failed write left older versions read, each fault's recovery time). The
//! verdict fails on any violation; `--coherence off` with writes across processes must fail,
//! which `--expect fail` turns into the check's own self-test.

use std::time::Duration;

use clap::{Args, ValueEnum};
use echostore_testkit::{Proxy, duration};
use rand::Rng;

pub(crate) use crate::coherence::{Mode, Switch};
use crate::{CliResult, Outcome};
use faults::{Fault, Reach};
use history::{FaultSpan, Op};
use model::{Bounds, Early, ShortLives};
use report::Report;
use target::Target;

mod faults;
mod figures;
mod history;
mod model;
mod report;
mod rows;
mod source;
mod tables;
mod target;
mod tokens;
pub(crate) mod worker;
mod workers;
mod workload;

/// How long the workers run before the first fault.
const WARM_UP: Duration = Duration::from_secs(1);

/// The healthy stretch between one fault's grace and the next fault: there the rules that a
/// fault excuses (bounded staleness, one read per expiry, agreement) are judged unexcused. With
/// less than the grace between faults, their excuses overlapped and those rules were judged in
/// the first second and while the clock was skewed, nowhere else.
const HEALTHY: Duration = Duration::from_secs(2);

/// What a fault takes on average, from its start to its end (an outage 5 s, a kill a few ms): with
/// its grace and [`HEALTHY`], the time a run gives each fault by default.
const A_FAULTS_OWN_TIME: Duration = Duration::from_millis(2_500);

/// The margin taken off a value's fresh life before a second load counts as extra: the span
/// between a load's end and its value landing on Valkey.
const FRESH_MARGIN: Duration = Duration::from_millis(100);

/// How much sooner than its early window a refresh may start: the library's coarse-clock margin
/// (25 ms) and the coarse clock's tick (up to 10 ms).
const EARLY_SLACK: Duration = Duration::from_millis(35);

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

    /// How long the workers run: seconds (`30`) or a duration (`1m`). By default 30 s, or with
    /// faults long enough for each to come once, with its grace and a healthy stretch after it.
    #[arg(long, value_parser = seconds)]
    seconds: Option<Duration>,

    /// Faults to inject, in turn: none, all, or a comma-separated list of kill-tracking,
    /// kill-all, pause-write, pause-all, lose-table-keys, script-flush, restart, outage, crash,
    /// proxy, freeze, replace, kill-worker, slow-source, failing-source, skew (`kill` and `pause`
    /// name both), and with --cluster kill-primary, failover, migrate, pause-primary (`all` under
    /// --cluster: those four and lose-table-keys, script-flush, replace, kill-worker, slow-source,
    /// failing-source; restart, outage and proxy are refused there).
    #[arg(long, default_value = "none", value_parser = faults::FaultList::parse)]
    faults: faults::FaultList,

    /// Run against a local Valkey Cluster (3 primaries, a replica each, 1 s node timeout, full
    /// coverage off) instead of one server, the workers' stores on `valkey_cluster`.
    #[arg(long)]
    cluster: bool,

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

    /// Schemas side by side (`.schema(n)`, a rolling deploy): worker `p` runs schema
    /// `p % schemas`; each schema loads an id once per expiry, and every write reaches all.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub(crate) schemas: u32,

    /// Concurrent callers per worker.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    tasks: u32,

    /// Percent of calls that are reads (one in four a `fetch_many` of 2 to 8 ids, one in eight
    /// of those of 17 to 24, at most `--keys`); the writes are
    /// puts, invalidates and deletes, 16 to 5 to 4, and one in 200 invalidates a tag or clears
    /// the table (recorded as an invalidate of each id it covers). With few writes (`98`) and a
    /// short `--ttl`, values live to their expiry and `check-string`'s early refreshes run.
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
    /// stderr) and print where it is; a run whose verdict is not the one expected keeps it always.
    #[arg(long)]
    keep: bool,

    /// Print one JSON object instead of the readout.
    #[arg(long)]
    json: bool,
}

/// Runs the check and prints its report.
pub(crate) async fn run(url: Option<&str>, args: &CheckArgs) -> CliResult<Outcome> {
    let asked = args.faults.resolve(args.cluster)?;
    let mut target = Target::start(url, args.cluster).await?;
    let dir = tempfile::Builder::new()
        .prefix("echostore-check-")
        .tempdir()?;
    let source = source::Source::create(dir.path(), tables::TABLES.len() as u8, args.keys)?;

    let (faults, mut skipped) = injectable(asked, &target);
    let proxy = match faults.contains(&Fault::Proxy) {
        true => Some(Proxy::bind(&target.url()).await?),
        false => None,
    };
    let namespace = format!("check-{:016x}", rand::rng().random::<u64>());
    let worker_args = args.workers(dir.path(), &namespace);
    // Worker 0 reaches Valkey through the proxy when the proxy fault is on.
    let urls: Vec<String> = (0..args.processes)
        .map(|p| match (&proxy, p) {
            (Some(proxy), 0) => proxy.url(),
            _ => target.url(),
        })
        .collect();
    let mut workers = workers::Workers::spawn(&urls, &worker_args, dir.path())?;
    workers.ready().await?;

    let spans = {
        let mut reach = Reach {
            target: &mut target,
            workers: &mut workers,
            proxy: proxy.as_ref(),
            source: &source,
            namespace: &namespace,
            keys: args.keys,
            next_crash: 0,
            next_skew: 1,
            next_freeze: 2,
            next_replace: 3,
            next_kill: 4,
            next_process: args.processes,
            schemas: args.schemas,
        };
        let gap = args.grace() + HEALTHY;
        schedule(&faults, (args.run_for(), gap), &mut reach, &mut skipped).await?
    };
    let stopping = history::now_ns();
    workers.stop().await?;
    let ops = history::settle_begun(histories(dir.path(), &workers.processes())?, &spans);
    let findings = model::check(&ops, &with_the_stop(&spans, stopping), args.bounds());
    let report = Report::new(args, &ops, &spans, skipped, findings);
    let held = report.verdict() == args.expect.unwrap_or(Verdict::Pass);
    // A run that did not hold keeps its histories whatever the flags: a failure met once (in
    // CI, on a loaded machine) can then be read call by call.
    if args.keep || !held {
        let kept = dir.keep();
        std::fs::write(kept.join("faults.json"), serde_json::to_string(&spans)?)?;
        eprintln!("check: the run's histories are in {}", kept.display());
    }
    match args.json {
        true => crate::output::print_json(&report)?,
        false => report.print(),
    }
    Ok(match held {
        true => Outcome::Held,
        false => Outcome::Failed,
    })
}

impl CheckArgs {
    /// Each worker's flags, in a run whose directory is `dir` and namespace `namespace`.
    fn workers(&self, dir: &std::path::Path, namespace: &str) -> Vec<worker::WorkerArgs> {
        let seed: u64 = rand::rng().random();
        (0..self.processes)
            .map(|process| worker::WorkerArgs {
                process,
                dir: dir.to_owned(),
                namespace: namespace.to_owned(),
                keys: self.keys,
                schema: process % self.schemas,
                tasks: self.tasks,
                reads: self.reads,
                ttl: self.ttl,
                source_latency: self.source_latency,
                unconfirmed_l1_life: self.unconfirmed_l1_life,
                coherence: self.coherence,
                tracking: self.tracking,
                seed,
            })
            .collect()
    }

    /// How long the workers run: `--seconds`, or by default 30 s, stretched with faults so that
    /// each comes once (its own time, its grace and a healthy stretch).
    fn run_for(&self) -> Duration {
        let faults = self.faults.resolve(self.cluster).map_or(0, |f| f.len());
        let each = self.grace() + HEALTHY + A_FAULTS_OWN_TIME;
        let enough = WARM_UP + each * faults as u32;
        self.seconds
            .unwrap_or_else(|| enough.max(Duration::from_secs(30)))
    }

    /// The bounds the model is checked with.
    fn bounds(&self) -> Bounds {
        let jitter = 0.1; // the tables keep the default jitter
        let fresh = |ttl: Duration| ttl.mul_f64(1.0 - jitter).saturating_sub(FRESH_MARGIN);
        let fresh_for = fresh(self.ttl);
        Bounds {
            staleness: self.bound.as_nanos() as u64,
            fault_grace: self.grace().as_nanos() as u64,
            fresh_for: fresh_for.as_nanos() as u64,
            schemas: self.schemas,
            early: Early {
                beta: tables::EARLY_REFRESH,
                slack: EARLY_SLACK.as_nanos() as u64,
            },
            short: ShortLives {
                tables: tables::SHORT_ODD,
                fresh_for: fresh(tables::life(0, 1, self.ttl)).as_nanos() as u64,
            },
        }
    }

    /// How long after a fault its effects are excused, unless `--fault-grace` says otherwise: a
    /// store is whole again at most a breaker cooldown (1 s, after a long outage) and a tracking
    /// reconnect pause (0.5 s) after Valkey is, and what its L1 took meanwhile lives one
    /// `unconfirmed_l1_life` more; a lock whose release the fault failed lives to its `PX`
    /// ([`tables::LOCK_TTL`]), and the flights waiting on it resume with what they held then.
    fn grace(&self) -> Duration {
        let whole = self.unconfirmed_l1_life + Duration::from_millis(1_500);
        let orphaned = tables::LOCK_TTL + Duration::from_millis(500);
        self.fault_grace.unwrap_or(whole.max(orphaned))
    }
}

/// The faults of `asked` that `target` can take, and those it cannot, with why (to be reported
/// as skipped).
fn injectable(asked: Vec<Fault>, target: &Target) -> (Vec<Fault>, Vec<(String, String)>) {
    let mut skipped = Vec::new();
    let faults = asked
        .into_iter()
        .filter(|f| match faults::unavailable(*f, target.is_embedded()) {
            Some(why) => {
                skipped.push((f.name().to_owned(), why.to_owned()));
                false
            }
            None => true,
        })
        .collect();
    (faults, skipped)
}

/// Runs the workers for `seconds`, injecting `faults` in turn from [`WARM_UP`] on, spaced evenly
/// (each at least `gap` after the previous one ended: its grace and a healthy stretch). A fault
/// the server refuses is skipped and said so; a run too short for every fault says which it
/// did not reach.
async fn schedule(
    faults: &[Fault],
    (seconds, gap): (Duration, Duration),
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
    let slots = (seconds.saturating_sub(WARM_UP).as_secs_f64() / gap.as_secs_f64())
        .floor()
        .max(1.0) as usize;
    let rounds = slots.div_ceil(faults.len()).max(1);
    let spacing = seconds.saturating_sub(WARM_UP) / (faults.len() * rounds) as u32;
    let mut next = begun + WARM_UP;
    for fault in faults.iter().cycle().take(faults.len() * rounds) {
        tokio::time::sleep_until(next).await;
        if tokio::time::Instant::now() >= end {
            for left in faults
                .iter()
                .filter(|f| !spans.iter().any(|s| s.name == f.name()))
            {
                if !skipped.iter().any(|(name, _)| name == left.name()) {
                    let why = "the run ended first (a longer --seconds reaches it)";
                    skipped.push((left.name().to_owned(), why.to_owned()));
                }
            }
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
        next = (next + spacing).max(tokio::time::Instant::now() + gap);
    }
    tokio::time::sleep_until(end).await;
    Ok(spans)
}

/// The spans the model judges by: the faults, and the fleet's own stop at the end of the run,
/// which excuses calls that fail only, as a `replace` does: a caller in a worker still running
/// may wait on a lock of a worker that is leaving (each hands its locks back as it shuts down).
fn with_the_stop(spans: &[FaultSpan], stopping: u64) -> Vec<FaultSpan> {
    let stop = FaultSpan {
        excuses: history::Excuses::FailedCalls,
        ..FaultSpan::new("the fleet's stop", stopping, history::now_ns())
    };
    spans.iter().cloned().chain([stop]).collect()
}

/// Every worker's history, merged.
fn histories(dir: &std::path::Path, processes: &[u32]) -> CliResult<Vec<Op>> {
    let mut ops = Vec::new();
    for p in processes {
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        check: CheckArgs,
    }

    fn run_for(flags: &[&str]) -> Duration {
        let args = std::iter::once("check").chain(flags.iter().copied());
        Command::parse_from(args).check.run_for()
    }

    /// With no `--seconds`, a run with faults lasts long enough for every fault to come once;
    /// without faults, 30 s; `--seconds` always wins.
    #[test]
    fn a_run_with_faults_lasts_long_enough_for_each() {
        assert_eq!(run_for(&[]), Duration::from_secs(30));
        assert_eq!(run_for(&["--faults", "skew"]), Duration::from_secs(30));
        let each = Duration::from_millis(2_500) + HEALTHY + A_FAULTS_OWN_TIME;
        let all = run_for(&["--faults", "all"]);
        assert_eq!(all, WARM_UP + each * Fault::ALL.len() as u32);
        let cluster = run_for(&["--cluster", "--faults", "all"]);
        assert_eq!(cluster, WARM_UP + each * Fault::CLUSTER.len() as u32);
        assert_eq!(
            run_for(&["--seconds", "20", "--faults", "all"]),
            Duration::from_secs(20)
        );
    }
}
