//! One worker of `echostore check`: a separate OS process (this binary with the hidden
//! `check-worker` subcommand) holding its own store and the run's [`Tables`], on one Valkey
//! (`--valkey redis://…`) or a cluster (`--valkey cluster:<seed>,<seed>,…`). Its tasks make the
//! [`workload`](super::workload)'s calls and record each, and every loader call, to its history.
//!
//! It talks to the controller in lines: it prints `ready` once its tables are tracked, then
//! takes `crash` (crash the struct table's owner; it answers `crashed <start> <end>`, or
//! `crashed none <start> <end>` when the owner was not restarted: the writes were held all the
//! same), `skew <ms>` (EchoStore's view of this
//! process's wall clock runs that far ahead, or behind when negative; it answers `skewed <ms>`)
//! and `stop` (or the end of stdin) on stdin, and prints `done` once its history is flushed.

use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use echostore::{Store, Table};
use echostore_testkit::duration;
use tokio::sync::mpsc;

use super::history::{Recorder, now_ns};
use super::source::Source;
use super::tables::{CRASH_IDS, Item, Loading, TABLES, Tables};
use super::tokens::Tokens;
use super::workload::Workload;
use super::{Mode, Switch};
use crate::{CliResult, Outcome};

/// How long Valkey holds writes around an owner crash, so that some are on the wire in it.
const CRASH_PAUSE_MS: u64 = 200;

/// What a worker's `--valkey` names a cluster with: `cluster:<seed>,<seed>,…`.
pub(crate) const CLUSTER_PREFIX: &str = "cluster:";

/// Flags of the hidden `echostore --valkey URL check-worker` (URL: `cluster:<seed>,…` for a
/// cluster).
#[derive(Debug, Clone, Args)]
pub(crate) struct WorkerArgs {
    /// This worker's number.
    #[arg(long)]
    pub(crate) process: u32,
    /// The run's directory: the source rows, and this worker's history file.
    #[arg(long)]
    pub(crate) dir: PathBuf,
    /// The run's namespace on Valkey.
    #[arg(long)]
    pub(crate) namespace: String,
    /// Ids per table.
    #[arg(long)]
    pub(crate) keys: u32,
    /// This worker's tables' schema (`.schema(n)`).
    #[arg(long)]
    pub(crate) schema: u32,
    /// Concurrent tasks making calls.
    #[arg(long)]
    pub(crate) tasks: u32,
    /// Percent of calls that are reads.
    #[arg(long)]
    pub(crate) reads: u32,
    #[arg(long, value_parser = duration::parse)]
    pub(crate) ttl: Duration,
    #[arg(long, value_parser = duration::parse)]
    pub(crate) source_latency: Duration,
    #[arg(long, value_parser = duration::parse)]
    pub(crate) unconfirmed_l1_life: Duration,
    #[arg(long, value_enum)]
    pub(crate) coherence: Switch,
    #[arg(long, value_enum)]
    pub(crate) tracking: Mode,
    #[arg(long)]
    pub(crate) seed: u64,
}

/// The URL of every node `url` names: the one server, or each seed of `cluster:<seed>,…`.
fn nodes(url: &str) -> Vec<String> {
    match url.strip_prefix(CLUSTER_PREFIX) {
        Some(seeds) => seeds.split(',').map(str::to_owned).collect(),
        None => vec![url.to_owned()],
    }
}

/// How long a leaving worker waits for its store's work under way (`Store::shutdown`).
const SHUTDOWN_WITHIN: Duration = Duration::from_secs(10);

/// Runs one worker until the controller says `stop`.
pub(crate) async fn run(url: &str, args: &WorkerArgs) -> CliResult<Outcome> {
    super::tables::quiet_deliberate_panics();
    let history = std::fs::File::create(args.dir.join(format!("history-{}.jsonl", args.process)))?;
    let recorder = Recorder::new(args.process, history);
    let builder = match url.strip_prefix(CLUSTER_PREFIX) {
        Some(seeds) => Store::builder().valkey_cluster(seeds.split(',')),
        None => Store::builder().valkey(url),
    };
    let store = builder
        .require_valkey(true)
        .coherence(args.coherence == Switch::On)
        .tracking(args.tracking.tracking())
        .unconfirmed_l1_life(args.unconfirmed_l1_life)
        .namespace(args.namespace.as_str())
        .build()
        .await?;
    let source = Source::open(&args.dir);
    let loading = Loading {
        source: source.clone(),
        recorder: recorder.clone(),
        latency: args.source_latency,
        ttl: args.ttl,
        schema: args.schema,
        process: args.process,
    };
    let tables = Tables::open(&store, &loading).await?;
    match (args.coherence, args.tracking) {
        (Switch::On, Mode::Broadcast) => tracked(url, args, &tables).await?,
        // Valkey pushes only what a store read: a probe would never arrive. The tables started
        // once the tracking connection was up.
        (Switch::On, Mode::Keys) if !store.is_coherent() => {
            return Err("key tracking is not up".into());
        }
        _ => {}
    }
    println!("ready");

    let workload = Arc::new(Workload {
        tables: tables.clone(),
        tokens: Tokens::in_dir(&args.dir),
        source,
        recorder: recorder.clone(),
        process: args.process,
        keys: args.keys,
        reads: args.reads,
        declined: Default::default(),
        writes_only: Default::default(),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..args.tasks)
        .map(|task| {
            let seed = args.seed ^ (u64::from(args.process) << 32) ^ u64::from(task);
            tokio::spawn(Arc::clone(&workload).calls(seed, Arc::clone(&stop)))
        })
        .collect();
    obey(&nodes(url), &workload).await;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await?;
    }
    recorder.flush()?;
    // A leaving process hands back the locks its store's fills hold, as a deploy's should
    // (docs/operations.md, "Stopping a process").
    if let Err(e) = store.shutdown(SHUTDOWN_WITHIN).await {
        tracing::warn!(error = %e, "work still under way as the worker leaves");
    }
    // What the tables did, in the worker's stderr: which paths the run took (early refreshes,
    // fenced writes, coalesced reads), for whoever reads a kept run.
    for (name, stats) in TABLES.iter().zip([
        tables.numbers.stats(),
        tables.names.stats(),
        tables.items.stats(),
    ]) {
        tracing::info!(table = name, ?stats, "table stats at the end of the run");
    }
    let declined = workload.declined.load(Ordering::Relaxed);
    tracing::info!(
        declined,
        "reads refused by a loser policy or their own wait, unrecorded"
    );
    println!("done");
    Ok(Outcome::Held)
}

/// Does what the controller says on stdin until `stop` or the end of stdin.
async fn obey(nodes: &[String], workload: &Workload) {
    let mut control = stdin_lines();
    let mut crashes = 0;
    while let Some(line) = control.recv().await {
        match line.trim() {
            "crash" => {
                crashes += 1;
                match crash(nodes, &workload.tables.items, CRASH_IDS + crashes).await {
                    (start, end, true) => println!("crashed {start} {end}"),
                    (start, end, false) => println!("crashed none {start} {end}"),
                }
            }
            "write" => {
                workload.writes_only.store(true, Ordering::Relaxed);
                println!("writing");
            }
            "stop" => break,
            line => {
                if let Some(Ok(by_ms)) = line.strip_prefix("skew ").map(str::parse::<i64>) {
                    echostore::protocol::offset_wall_clock(by_ms);
                    println!("skewed {by_ms}");
                }
            }
        }
    }
}

/// Waits until a write under each table's prefix has reached it through coherence: on a cluster,
/// a write on every primary (each has its own tracking connection).
async fn tracked(url: &str, args: &WorkerArgs, tables: &Tables) -> CliResult<()> {
    // A probe id the key type cannot parse back arrives as a flush of L1.
    let reached = |s: echostore::TableStats| s.invalidations + s.coherence_flushes;
    let pushes = |i: usize| match i {
        0 => reached(tables.numbers.stats()),
        1 => reached(tables.names.stats()),
        _ => reached(tables.items.stats()),
    };
    let probes = probes(url, args.process).await?;
    // A table of schema n hears only of its own schema's keys: the probe carries their suffix.
    let suffixes = [
        schema_suffix(tables.numbers.key_names(&0)?.value),
        schema_suffix(tables.names.key_names("id-0")?.value),
        schema_suffix(tables.items.key_names(&Item { n: 0, copy: 0 })?.value),
    ];
    for (i, table) in TABLES.iter().enumerate() {
        let suffix = &suffixes[i];
        for (node, tag) in &probes {
            let probe = format!("{}:{table}:{{{tag}}}{suffix}", args.namespace);
            crate::valkey::until_pushed(node, &probe, || pushes(i)).await?;
        }
    }
    Ok(())
}

/// What follows the id's `}` in a value key: the table's schema suffix (none for schema 0).
fn schema_suffix(value_key: Vec<u8>) -> String {
    match value_key.iter().rposition(|&b| b == b'}') {
        Some(close) => String::from_utf8_lossy(&value_key[close + 1..]).into_owned(),
        None => String::new(),
    }
}

/// Where to write probes, and their ids: the one server, or each primary of a cluster with an
/// id whose hash slot it serves (`CLUSTER SLOTS`, asked of the first seed).
async fn probes(url: &str, process: u32) -> CliResult<Vec<(String, String)>> {
    let Some(seeds) = url.strip_prefix(CLUSTER_PREFIX) else {
        return Ok(vec![(url.to_owned(), format!("probe-{process}"))]);
    };
    let seed = seeds.split(',').next().unwrap_or_default();
    let mut conn = redis::Client::open(seed)?
        .get_multiplexed_async_connection()
        .await?;
    let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await?;
    let mut probes = Vec::new();
    for (range, node) in slots.iter().filter_map(|entry| served(entry)) {
        let tag = (0..)
            .map(|n| format!("probe-{process}-{n}"))
            .find(|tag| range.contains(&embedded_valkey::slot_of(tag.as_bytes())))
            .unwrap_or_default();
        probes.push((node, tag));
    }
    Ok(probes)
}

/// One entry of `CLUSTER SLOTS`: a range of slots and the URL of the primary serving it.
fn served(entry: &[redis::Value]) -> Option<(std::ops::RangeInclusive<u16>, String)> {
    let first: u16 = redis::from_redis_value_ref(entry.first()?).ok()?;
    let last: u16 = redis::from_redis_value_ref(entry.get(1)?).ok()?;
    let redis::Value::Array(primary) = entry.get(2)? else {
        return None;
    };
    let host: String = redis::from_redis_value_ref(primary.first()?).ok()?;
    let port: u16 = redis::from_redis_value_ref(primary.get(1)?).ok()?;
    Some((first..=last, format!("redis://{host}:{port}/")))
}

/// Crashes the struct table's owner with writes on the wire: Valkey holds writes for a moment
/// (`CLIENT PAUSE … WRITE` on every node, where the server allows it), a put of a fresh crash id
/// is on its way, and a read of another caller's copy of that id reaches the owner (an id being
/// written is the owner's to answer), which compares the two copies in its flights map and
/// panics — whichever of the two arrives first. Returns when the crash began, when it ended (the
/// supervisor had restarted the owner; or, when it had not within 5 s, the two calls had
/// returned: the held writes still stalled every process), and whether the owner restarted.
async fn crash(nodes: &[String], items: &Table<Item, u64>, n: u32) -> (u64, u64, bool) {
    let start = now_ns();
    for node in nodes {
        if let Ok(client) = redis::Client::open(node.as_str())
            && let Ok(mut conn) = client.get_multiplexed_async_connection().await
        {
            let _: redis::RedisResult<()> = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(CRASH_PAUSE_MS)
                .arg("WRITE")
                .query_async(&mut conn)
                .await;
        }
    }
    let restarts = items.stats().owner_restarts;
    // Each on a task of its own: a copy that met the other outside the owner panics there.
    let put = tokio::spawn({
        let items = items.clone();
        async move { items.put(&Item { n, copy: 1 }, 0).await }
    });
    let get = tokio::spawn({
        let items = items.clone();
        async move { items.get(&Item { n, copy: 2 }).await }
    });
    let _ = get.await;
    let _ = put.await;
    let answered = now_ns();
    let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
    while items.stats().owner_restarts == restarts {
        if tokio::time::Instant::now() > give_up {
            return (start, answered, false);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    (start, now_ns(), true)
}

/// The controller's lines on stdin; the channel closes with stdin.
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
