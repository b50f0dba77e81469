//! One worker of `echostore check`: a separate OS process (this binary with the hidden
//! `check-worker` subcommand) holding its own store and three tables of different key types, all
//! reading the run's shared [`Source`]. Its tasks make random gets, puts and invalidates of a
//! small hot set of ids, and now and then invalidate a tag or clear a table (a group write), and
//! record every call, and every loader call, to its history file.
//!
//! It talks to the controller in lines: it prints `ready` once its tables are tracked, then
//! takes `crash` (crash the struct table's owner; it answers `crashed <start> <end>`, or
//! `crashed none` when the owner was not restarted), `skew <ms>` (EchoStore's view of this
//! process's wall clock runs that far ahead, or behind when negative; it answers `skewed <ms>`)
//! and `stop`
//! (or the end of stdin) on stdin, and prints `done` once its history is flushed.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use echostore::{Error, Key, LoserPolicy, Store, Table};
use echostore_testkit::duration;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;

use super::history::{Action, Op, now_ns};
use super::source::Source;
use super::{Mode, Switch};
use crate::{CliResult, Outcome};

/// The tables of a run, by index: a `u64` key, a `String` key, and a struct key that keeps the
/// default `from_rendered` (so every push for it flushes the table's L1).
pub(crate) const TABLES: [&str; 3] = ["check-u64", "check-string", "check-struct"];

/// The struct table's ids from here up have an `Eq` that panics when two callers' copies of one
/// meet: the `crash` fault, a fresh id each time (an id crashed once may be cached since).
const CRASH_IDS: u32 = u32::MAX - 10_000;

/// How long Valkey holds writes around an owner crash, so that some are on the wire in it.
const CRASH_PAUSE_MS: u64 = 200;

/// How long one call may take before the worker records it as failed and moves on.
const CALL_LIMIT: Duration = Duration::from_secs(10);

/// Every id carries one tag, `g<id % TAG_GROUPS>`, for the group writes (`invalidate_tag`).
const TAG_GROUPS: u32 = 4;

/// One write in this many invalidates a group: a tag (three times in four), or the whole table.
const GROUP_WRITE_EVERY: u32 = 200;

/// Flags of the hidden `echostore --valkey URL check-worker`.
#[derive(Debug, Args)]
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

/// The struct key: a plain user type with the default `from_rendered`. `copy` tells two
/// callers' copies apart; it takes no part in the id.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    n: u32,
    copy: u8,
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        // The crash fault: a user `Key` bug, met where the owner compares two callers' ids.
        assert!(
            !(self.n >= CRASH_IDS && self.n == other.n && self.copy != other.copy),
            "Item::eq on the crash id"
        );
        self.n == other.n
    }
}

impl Eq for Item {}

impl Hash for Item {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.n.hash(state);
    }
}

impl Key for Item {
    fn render(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.n.to_string().into_bytes())
    }
}

/// Where a worker's operations go: its history file, one JSON line each.
#[derive(Clone)]
struct Recorder {
    process: u32,
    out: Arc<Mutex<BufWriter<std::fs::File>>>,
}

impl Recorder {
    fn record(&self, mut op: Op) {
        op.process = self.process;
        if let (Ok(line), Ok(mut out)) = (serde_json::to_string(&op), self.out.lock()) {
            let _ = writeln!(out, "{line}");
        }
    }

    fn flush(&self) -> std::io::Result<()> {
        match self.out.lock() {
            Ok(mut out) => out.flush(),
            Err(_) => Ok(()),
        }
    }
}

/// The three tables, one call surface.
#[derive(Clone)]
struct Tables {
    numbers: Table<u64, u64>,
    names: Table<String, u64>,
    items: Table<Item, u64>,
}

impl Tables {
    async fn read(&self, table: u8, id: u32) -> echostore::Result<(u64, String)> {
        let fetched = match table {
            0 => self.numbers.fetch(&u64::from(id)).await?,
            1 => self.names.fetch(name(id).as_str()).await?,
            _ => self.items.fetch(&item(id)).await?,
        };
        Ok((*fetched.value, fetched.origin.to_string()))
    }

    async fn put(&self, table: u8, id: u32, version: u64) -> echostore::Result<()> {
        match table {
            0 => self.numbers.put(&u64::from(id), version).await?,
            1 => self.names.put(name(id).as_str(), version).await?,
            _ => self.items.put(&item(id), version).await?,
        };
        Ok(())
    }

    /// Invalidates every entry tagged `g<group>`, or the whole table (`None`).
    async fn invalidate_group(&self, table: u8, group: Option<u32>) -> echostore::Result<()> {
        let Some(group) = group else {
            return match table {
                0 => self.numbers.clear().await,
                1 => self.names.clear().await,
                _ => self.items.clear().await,
            };
        };
        let tag = format!("g{group}");
        match table {
            0 => self.numbers.invalidate_tag(&tag).await,
            1 => self.names.invalidate_tag(&tag).await,
            _ => self.items.invalidate_tag(&tag).await,
        }
    }

    async fn invalidate(&self, table: u8, id: u32) -> echostore::Result<()> {
        match table {
            0 => self.numbers.invalidate(&u64::from(id)).await,
            1 => self.names.invalidate(name(id).as_str()).await,
            _ => self.items.invalidate(&item(id)).await,
        }
    }
}

fn name(id: u32) -> String {
    format!("id-{id}")
}

fn item(n: u32) -> Item {
    Item { n, copy: 0 }
}

/// Runs one worker until the controller says `stop`.
pub(crate) async fn run(url: &str, args: &WorkerArgs) -> CliResult<Outcome> {
    let history = std::fs::File::create(args.dir.join(format!("history-{}.jsonl", args.process)))?;
    let recorder = Recorder {
        process: args.process,
        out: Arc::new(Mutex::new(BufWriter::new(history))),
    };
    let store = Store::builder()
        .valkey(url)
        .require_valkey(true)
        .coherence(args.coherence == Switch::On)
        .tracking(args.tracking.tracking())
        .unconfirmed_l1_life(args.unconfirmed_l1_life)
        .namespace(args.namespace.as_str())
        .build()
        .await?;
    let source = Source::open(&args.dir);
    let tables = Tables {
        numbers: open(&store, args, 0, &source, &recorder, |id: &u64| *id as u32).await?,
        names: open(&store, args, 1, &source, &recorder, |id: &String| {
            id.strip_prefix("id-")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        })
        .await?,
        items: open(&store, args, 2, &source, &recorder, |id: &Item| id.n).await?,
    };
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

    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for task in 0..args.tasks {
        let seed = args.seed ^ (u64::from(args.process) << 32) ^ u64::from(task);
        tasks.push(tokio::spawn(calls(
            tables.clone(),
            source.clone(),
            recorder.clone(),
            args.keys,
            args.reads,
            seed,
            Arc::clone(&stop),
        )));
    }
    let mut control = stdin_lines();
    let mut crashes = 0;
    while let Some(line) = control.recv().await {
        match line.trim() {
            "crash" => {
                crashes += 1;
                match crash(url, &tables.items, CRASH_IDS + crashes).await {
                    Some((start, end)) => println!("crashed {start} {end}"),
                    None => println!("crashed none"),
                }
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
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await?;
    }
    recorder.flush()?;
    println!("done");
    Ok(Outcome::Held)
}

/// One table of the run: every loader call reads the source and is recorded as a `Load`.
async fn open<K: Key>(
    store: &Store,
    args: &WorkerArgs,
    table: u8,
    source: &Source,
    recorder: &Recorder,
    id_of: fn(&K) -> u32,
) -> CliResult<Table<K, u64>> {
    let (source, recorder, latency) = (source.clone(), recorder.clone(), args.source_latency);
    let table = store
        .table::<K, u64>(TABLES[usize::from(table)])
        .ttl(args.ttl)
        .stale_for(args.ttl)
        // Early refresh would load before expiry on purpose; the one-read rule counts by expiry.
        .early_refresh(0.0)
        // The value is the source's version: writes are ordered by it, as the model compares
        // versions (without it the last write to reach Valkey wins, which a slow put of an older
        // version can be: docs/consistency.md, rule 6).
        .version_by(|version: &u64| *version)
        .tags(move |key: &K, _: &u64| [format!("g{}", id_of(key) % TAG_GROUPS)])
        .losers(LoserPolicy::Poll {
            every: Duration::from_millis(20),
            up_to: Duration::from_secs(5),
        })
        .loader(move |key: K| {
            let (source, recorder) = (source.clone(), recorder.clone());
            let id = id_of(&key);
            async move {
                if id >= CRASH_IDS {
                    // The crash fault's flight: long enough for its second caller to meet it.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    return Ok(0);
                }
                let start = now_ns();
                // The row is read first and the answer comes after the latency: a write that
                // lands meanwhile makes this load's value old, as a slow query's would be.
                let version = source.read(table, id)?;
                tokio::time::sleep(latency).await;
                recorder.record(Op {
                    process: 0,
                    table,
                    id,
                    action: Action::Load,
                    version,
                    ok: true,
                    origin: String::new(),
                    start,
                    end: now_ns(),
                });
                Ok::<_, std::io::Error>(version)
            }
        })
        .start()
        .await?;
    Ok(table)
}

/// Waits until a write under each table's prefix has reached it through coherence.
async fn tracked(url: &str, args: &WorkerArgs, tables: &Tables) -> CliResult<()> {
    // A probe id the key type cannot parse back arrives as a flush of L1.
    let reached = |s: echostore::TableStats| s.invalidations + s.coherence_flushes;
    let pushes = |i: usize| match i {
        0 => reached(tables.numbers.stats()),
        1 => reached(tables.names.stats()),
        _ => reached(tables.items.stats()),
    };
    for (i, table) in TABLES.iter().enumerate() {
        let probe = format!("{}:{table}:{{probe-{}}}", args.namespace, args.process);
        crate::valkey::until_pushed(url, &probe, || pushes(i)).await?;
    }
    Ok(())
}

/// One task's calls until `stop`: `reads` percent reads, the rest puts and invalidates (18 to
/// 7), over the hot ids.
async fn calls(
    tables: Tables,
    source: Source,
    recorder: Recorder,
    keys: u32,
    reads: u32,
    seed: u64,
    stop: Arc<AtomicBool>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::SeqCst) {
        let table = rng.random_range(0..TABLES.len() as u8);
        let id = rng.random_range(0..keys);
        let roll = rng.random_range(0..100);
        let start = now_ns();
        let (action, version, ok, origin) = if roll < reads {
            match bounded(tables.read(table, id)).await {
                Ok((version, origin)) => (Action::Read, version, true, origin),
                Err(_) => (Action::Read, 0, false, String::new()),
            }
        } else if rng.random_range(0..GROUP_WRITE_EVERY) == 0 {
            let group = (rng.random_range(0..4) > 0).then(|| rng.random_range(0..TAG_GROUPS));
            group_write(&tables, &source, &recorder, table, keys, group, start).await;
            continue;
        } else {
            let action = if rng.random_range(0..25) < 18 {
                Action::Put
            } else {
                Action::Invalidate
            };
            let Ok(version) = source.bump(table, id) else {
                continue;
            };
            let done = match action {
                Action::Put => bounded(tables.put(table, id, version)).await,
                _ => bounded(tables.invalidate(table, id)).await,
            };
            (action, version, done.is_ok(), String::new())
        };
        recorder.record(Op {
            process: 0,
            table,
            id,
            action,
            version,
            ok,
            origin,
            start,
            end: now_ns(),
        });
        let pause = rng.random_range(0..=2);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// A group write: every id of the group (those tagged `g<group>`, or every id for `None`) is moved
/// on at the source, then the group is invalidated in one call, recorded as an invalidate of each
/// id: to the model it is that many writes, made at once.
async fn group_write(
    tables: &Tables,
    source: &Source,
    recorder: &Recorder,
    table: u8,
    keys: u32,
    group: Option<u32>,
    start: u64,
) {
    let ids = (0..keys).filter(|id| group.is_none_or(|g| id % TAG_GROUPS == g));
    let moved: Vec<(u32, u64)> = ids
        .filter_map(|id| source.bump(table, id).ok().map(|v| (id, v)))
        .collect();
    let ok = bounded(tables.invalidate_group(table, group)).await.is_ok();
    let end = now_ns();
    for (id, version) in moved {
        recorder.record(Op {
            process: 0,
            table,
            id,
            action: Action::Invalidate,
            version,
            ok,
            origin: String::new(),
            start,
            end,
        });
    }
}

/// A call cut off after [`CALL_LIMIT`] (a black-holed link) counts as failed.
async fn bounded<T>(call: impl Future<Output = echostore::Result<T>>) -> echostore::Result<T> {
    tokio::time::timeout(CALL_LIMIT, call)
        .await
        .unwrap_or(Err(Error::WaitTimeout { waited: CALL_LIMIT }))
}

/// Crashes the struct table's owner with writes on the wire: Valkey holds writes for a moment
/// (`CLIENT PAUSE … WRITE`, where the server allows it), a put of a fresh crash id is on its way,
/// and a read of another caller's copy of that id reaches the owner (an id being written is the
/// owner's to answer), which compares the two copies in its flights map and panics — whichever
/// of the two arrives first. Returns when the crash began and when the supervisor had restarted
/// the owner; `None` if the owner was not restarted within 5 s (no crash to record).
async fn crash(url: &str, items: &Table<Item, u64>, n: u32) -> Option<(u64, u64)> {
    let start = now_ns();
    if let Ok(client) = redis::Client::open(url)
        && let Ok(mut conn) = client.get_multiplexed_async_connection().await
    {
        let _: redis::RedisResult<()> = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(CRASH_PAUSE_MS)
            .arg("WRITE")
            .query_async(&mut conn)
            .await;
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
    let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
    while items.stats().owner_restarts == restarts {
        if tokio::time::Instant::now() > give_up {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Some((start, now_ns()))
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
