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
//! Writes a CSV row per cell to `--out` and a table to stdout; `scale_model` reads the CSV,
//! calibrates the fleet model with it and draws the plots in `docs/scale/`.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use echostore_testkit::info;
use embedded_valkey::EmbeddedValkey;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{mpsc, watch};

/// The table prefix the keys live under, as a table named `t` would.
const PREFIX: &str = "t:";

/// How long pushes may keep arriving after the last write before the cell is read: a backlog at
/// the receiving side (this process shares the machine with the server) drains within it.
const DRAIN_QUIET: Duration = Duration::from_millis(250);

/// The longest the drain waits, however many pushes still arrive.
const DRAIN_MAX: Duration = Duration::from_secs(10);

/// Writes in flight at once on the writer's connection; beyond it the writer falls behind its
/// rate, and the achieved rate says so.
const MAX_IN_FLIGHT: usize = 512;

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

    /// Fleets of OS processes (one tracking connection each) to measure as well, comma-separated:
    /// the small fleets the model is checked against. Empty for none.
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

/// One measured configuration.
#[derive(Debug, Clone, Copy)]
struct Cell {
    mode: Mode,
    conns: usize,
    /// 1: the connections are this process's; more: each is a process of its own.
    procs: usize,
    rate: u32,
    keys: u32,
    held: u32,
}

/// What one cell measured.
#[derive(Debug, Default)]
struct Row {
    writes: u64,
    achieved_rate: f64,
    /// Push messages received, over all connections.
    pushes: u64,
    /// Keys named in them (a BCAST push carries every key written in one event-loop turn).
    push_keys: u64,
    /// Their RESP3 bytes, as Valkey encodes them.
    push_bytes: u64,
    /// Refill reads the tracking connections made.
    refills: u64,
    cpu_us: f64,
    net_out_bytes: u64,
    set_calls: u64,
    set_usec: u64,
    get_calls: u64,
    get_usec: u64,
    lag_p50_us: u64,
    lag_p99_us: u64,
    lag_max_us: u64,
    /// Pushes whose write could not be found (should be 0).
    unmatched: u64,
}

/// What a tracking connection saw: each invalidated key with the moment its push arrived.
#[derive(Debug, Default)]
struct Seen {
    /// Key id and arrival, ns since the epoch (the wall clock, which every process here shares).
    arrivals: Vec<(u32, u64)>,
    pushes: u64,
    push_bytes: u64,
    refills: u64,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = match args.child_of.clone() {
        Some(url) => runtime.block_on(child(url, args)),
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
    let mut csv = String::from(CSV_HEADER);
    csv.push('\n');
    println!(
        "{:<8} {:>5} {:>6} {:>7} {:>8} {:>9} {:>10} {:>10} {:>9} {:>9}",
        "mode",
        "conns",
        "rate",
        "keys",
        "achieved",
        "cpu µs/w",
        "push B/w",
        "net B/w",
        "lag p50",
        "lag p99"
    );
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
                    measure_into(&client, &mut control, cell, &args, &mut csv).await?;
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
                    measure_into(&client, &mut control, cell, &args, &mut csv).await?;
                }
            }
        }
    }
    std::fs::write(&args.out, csv).map_err(|e| format!("{}: {e}", args.out))?;
    println!("\nwritten: {}", args.out);
    drop(valkey);
    Ok(())
}

/// A connection config that waits for replies as long as a loaded machine may need: redis-rs's
/// default response timeout is shorter than a busy cell's `INFO` or `FLUSHALL` can take.
fn patient() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)))
}

/// Measures one cell and adds its row to `csv`, written out at once so that a long run keeps
/// what it has measured; a cell that fails is reported and skipped.
async fn measure_into(
    client: &redis::Client,
    control: &mut MultiplexedConnection,
    cell: Cell,
    args: &Args,
    csv: &mut String,
) -> Result<(), String> {
    match measure(client, control, cell, args).await {
        Ok(row) => {
            print_row(cell, &row);
            csv_row(csv, cell, args.seconds, &row);
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

async fn measure(
    client: &redis::Client,
    control: &mut MultiplexedConnection,
    cell: Cell,
    args: &Args,
) -> Result<Row, String> {
    let err = |e: redis::RedisError| e.to_string();
    // A FLUSHALL frees the server's tracking table too, so no cell inherits another's.
    redis::cmd("FLUSHALL")
        .query_async::<()>(control)
        .await
        .map_err(err)?;
    preload(control, cell.keys).await.map_err(err)?;

    let mut rng = StdRng::seed_from_u64(args.seed ^ u64::from(cell.keys));
    let (stop_tx, stop) = watch::channel(false);
    let arrived = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(cell.conns);
    let mut children = Vec::new();
    if cell.procs > 1 {
        for i in 0..cell.procs {
            children.push(spawn_child(
                client,
                cell,
                args.seed ^ ((i as u64 + 1) << 20),
            )?);
        }
    }
    for _ in 0..cell.conns * usize::from(cell.procs <= 1) {
        let held: HashSet<u32> = sample(&mut rng, cell.keys as usize, cell.held as usize)
            .into_iter()
            .map(|i| i as u32)
            .collect();
        let conn = tracking_connection(client, cell.mode, &held, arrived.clone())
            .await
            .map_err(err)?;
        tasks.push(tokio::spawn(receive(conn, held, stop.clone())));
    }

    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(control)
        .await
        .map_err(err)?;
    let cpu_before = server_cpu(control).await.map_err(err)?;
    let writer = client
        .get_multiplexed_async_connection_with_config(&patient())
        .await
        .map_err(err)?;
    let started = Instant::now();
    let writes = write_paced(writer, cell, args.seconds, &mut rng).await;
    let achieved_rate = writes.len() as f64 / started.elapsed().as_secs_f64();
    if children.is_empty() {
        drain(&arrived).await;
    } else {
        // The processes' arrivals are not counted here: a fixed quiet period, long beside the
        // lags of a small fleet.
        tokio::time::sleep(CHILD_DRAIN).await;
    }
    let cpu_after = server_cpu(control).await.map_err(err)?;
    let info = info::read(control, "everything").await.map_err(err)?;
    stop_tx.send_replace(true);
    let mut seen = Vec::with_capacity(tasks.len());
    for task in tasks {
        seen.push(task.await.map_err(|e| e.to_string())?);
    }
    for child in children {
        seen.push(tokio::task::block_in_place(|| stop_child(child))?);
    }

    let mut row = Row {
        writes: writes.len() as u64,
        achieved_rate,
        cpu_us: (cpu_after - cpu_before) * 1e6,
        net_out_bytes: info::number(&info, "total_net_output_bytes").unwrap_or(0),
        ..Row::default()
    };
    (row.set_calls, row.set_usec) = command_stats(&info, "set");
    (row.get_calls, row.get_usec) = command_stats(&info, "get");
    lags(&writes, &seen, &mut row);
    Ok(row)
}

/// Sets every key of the key set once, so that the first read of each finds a value.
async fn preload(control: &mut MultiplexedConnection, keys: u32) -> redis::RedisResult<()> {
    for chunk in (0..keys).collect::<Vec<_>>().chunks(1000) {
        let mut mset = redis::cmd("MSET");
        for &id in chunk {
            mset.arg(key(id)).arg("v");
        }
        mset.query_async::<()>(control).await?;
    }
    Ok(())
}

fn key(id: u32) -> String {
    format!("{PREFIX}{id}")
}

/// A RESP3 connection tracking in `mode`, having read its held keys. Each push is stamped with
/// its arrival as redis-rs parses it, before any task switch.
async fn tracking_connection(
    client: &redis::Client,
    mode: Mode,
    held: &HashSet<u32>,
    arrived: Arc<AtomicU64>,
) -> redis::RedisResult<(
    MultiplexedConnection,
    mpsc::UnboundedReceiver<(u64, PushInfo)>,
)> {
    let info = client.get_connection_info().clone();
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let client = redis::Client::open(info.set_redis_settings(resp3))?;
    let (tx, rx) = mpsc::unbounded_channel();
    let config = patient().set_push_sender(move |push: PushInfo| {
        arrived.fetch_add(1, Ordering::Relaxed);
        tx.send((now_ns(), push))
    });
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let mut tracking = redis::cmd("CLIENT");
    tracking.arg("TRACKING").arg("ON");
    if mode == Mode::Bcast {
        tracking
            .arg("BCAST")
            .arg("PREFIX")
            .arg(PREFIX)
            .arg("PREFIX")
            .arg(format!("lock:{PREFIX}"));
    }
    tracking.query_async::<()>(&mut conn).await?;
    let ids: Vec<u32> = held.iter().copied().collect();
    for chunk in ids.chunks(500) {
        let mut mget = redis::cmd("MGET");
        for &id in chunk {
            mget.arg(key(id));
        }
        mget.query_async::<Value>(&mut conn).await?;
    }
    Ok((conn, rx))
}

/// A tracking connection's life in a cell: record each invalidated key's arrival, and refill
/// the held ones, until told to stop.
async fn receive(
    (mut conn, mut pushes): (
        MultiplexedConnection,
        mpsc::UnboundedReceiver<(u64, PushInfo)>,
    ),
    held: HashSet<u32>,
    mut stop: watch::Receiver<bool>,
) -> Seen {
    let mut seen = Seen::default();
    loop {
        let (at, push) = tokio::select! {
            push = pushes.recv() => match push {
                Some(push) => push,
                None => break,
            },
            _ = stop.changed() => break,
        };
        if push.kind != PushKind::Invalidate {
            continue;
        }
        let Some(Value::Array(keys)) = push.data.first() else {
            continue;
        };
        seen.pushes += 1;
        seen.push_bytes += push_bytes(keys);
        let mut refill = redis::cmd("MGET");
        let mut refills = 0;
        for k in keys {
            let Some(id) = id_of(k) else { continue };
            seen.arrivals.push((id, at));
            if held.contains(&id) {
                refill.arg(key(id));
                refills += 1;
            }
        }
        if refills > 0 {
            seen.refills += refills;
            let _ = refill.query_async::<Value>(&mut conn).await;
        }
    }
    seen
}

/// The id of a pushed key `t:<id>` (`None` for a lock key or anything else).
fn id_of(k: &Value) -> Option<u32> {
    match k {
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()?
            .strip_prefix(PREFIX)?
            .parse()
            .ok(),
        _ => None,
    }
}

/// The bytes of an invalidation push on the wire: `>2`, `invalidate`, then the array of keys.
fn push_bytes(keys: &[Value]) -> u64 {
    let bulk = |len: usize| (1 + len.to_string().len() + 2 + len + 2) as u64;
    let mut bytes = 4 + bulk("invalidate".len()) + 1 + keys.len().to_string().len() as u64 + 2;
    for k in keys {
        if let Value::BulkString(b) = k {
            bytes += bulk(b.len());
        }
    }
    bytes
}

/// One write: its key, when it was sent and when its reply came (ns since the epoch).
type Write = (u32, u64, u64);

/// The wall clock in ns: the one clock this process and its fleet's processes share.
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Sets uniformly chosen keys at `cell.rate` for `seconds`, pipelined on one connection; returns
/// each write in the order sent.
async fn write_paced(
    conn: MultiplexedConnection,
    cell: Cell,
    seconds: f64,
    rng: &mut StdRng,
) -> Vec<Write> {
    let total = (f64::from(cell.rate) * seconds) as usize;
    let mut writes: Vec<Option<Write>> = Vec::with_capacity(total);
    let mut in_flight = FuturesUnordered::new();
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    while writes.len() < total || !in_flight.is_empty() {
        tokio::select! {
            _ = tick.tick(), if writes.len() < total => {
                let due = (started.elapsed().as_secs_f64() * f64::from(cell.rate)) as usize;
                while writes.len() < due.min(total) && in_flight.len() < MAX_IN_FLIGHT {
                    let id = rng.random_range(0..cell.keys);
                    let seq = writes.len();
                    writes.push(None);
                    let mut conn = conn.clone();
                    in_flight.push(async move {
                        let sent = now_ns();
                        let _ = redis::cmd("SET")
                            .arg(key(id))
                            .arg(seq)
                            .query_async::<()>(&mut conn)
                            .await;
                        (seq, (id, sent, now_ns()))
                    });
                }
            }
            Some((seq, write)) = in_flight.next() => writes[seq] = Some(write),
        }
    }
    writes.into_iter().flatten().collect()
}

/// Waits until the tracking connections have had no push for [`DRAIN_QUIET`] (at most
/// [`DRAIN_MAX`]); they keep receiving and refilling meanwhile.
async fn drain(arrived: &AtomicU64) {
    let started = Instant::now();
    let mut last = arrived.load(Ordering::Relaxed);
    while started.elapsed() < DRAIN_MAX {
        tokio::time::sleep(DRAIN_QUIET).await;
        let now = arrived.load(Ordering::Relaxed);
        if now == last {
            return;
        }
        last = now;
    }
}

async fn server_cpu(control: &mut MultiplexedConnection) -> redis::RedisResult<f64> {
    let info = info::read(control, "cpu").await?;
    Ok(info::number(&info, "used_cpu_sys").unwrap_or(0.0)
        + info::number(&info, "used_cpu_user").unwrap_or(0.0))
}

/// `calls` and `usec` of `cmdstat_<command>`.
fn command_stats(info: &str, command: &str) -> (u64, u64) {
    let Some(line) = info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
    else {
        return (0, 0);
    };
    let field = |name: &str| {
        line.split(',')
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("calls"), field("usec"))
}

/// Matches each arrival to the write it announces (the last write of its key sent before it
/// arrived) and fills the lag percentiles and the push counts. A push that arrives before this
/// process has read the write's reply (both leave the server in one event-loop turn) counts as
/// zero lag.
fn lags(writes: &[Write], seen: &[Seen], row: &mut Row) {
    let mut by_key: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, w) in writes.iter().enumerate() {
        by_key.entry(w.0).or_default().push(i);
    }
    // Sent times per key are in the order sent, as `writes` is.
    let mut lag = Histogram::<u64>::new(3).expect("a histogram");
    for s in seen {
        row.pushes += s.pushes;
        row.push_bytes += s.push_bytes;
        row.refills += s.refills;
        for &(id, at) in &s.arrivals {
            row.push_keys += 1;
            let Some(list) = by_key.get(&id) else {
                row.unmatched += 1;
                continue;
            };
            let n = list.partition_point(|&i| writes[i].1 <= at);
            let Some(&i) = n.checked_sub(1).and_then(|n| list.get(n)) else {
                row.unmatched += 1;
                continue;
            };
            let micros = at.saturating_sub(writes[i].2) / 1_000;
            let _ = lag.record(micros.max(1));
        }
    }
    if !lag.is_empty() {
        row.lag_p50_us = lag.value_at_quantile(0.5);
        row.lag_p99_us = lag.value_at_quantile(0.99);
        row.lag_max_us = lag.max();
    }
}

const CSV_HEADER: &str = "mode,conns,procs,rate,keys,held,seconds,writes,achieved_rate,pushes,push_keys,push_bytes,refills,cpu_us,net_out_bytes,set_calls,set_usec,get_calls,get_usec,lag_p50_us,lag_p99_us,lag_max_us,unmatched";

fn csv_row(csv: &mut String, cell: Cell, seconds: f64, r: &Row) {
    let _ = writeln!(
        csv,
        "{},{},{},{},{},{},{},{},{:.1},{},{},{},{},{:.0},{},{},{},{},{},{},{},{},{}",
        cell.mode.name(),
        cell.conns,
        cell.procs,
        cell.rate,
        cell.keys,
        cell.held,
        seconds,
        r.writes,
        r.achieved_rate,
        r.pushes,
        r.push_keys,
        r.push_bytes,
        r.refills,
        r.cpu_us,
        r.net_out_bytes,
        r.set_calls,
        r.set_usec,
        r.get_calls,
        r.get_usec,
        r.lag_p50_us,
        r.lag_p99_us,
        r.lag_max_us,
        r.unmatched
    );
}

fn print_row(cell: Cell, r: &Row) {
    let per = |x: f64| x / (r.writes.max(1) as f64);
    let conns = if cell.procs > 1 {
        format!("{}p", cell.procs)
    } else {
        cell.conns.to_string()
    };
    println!(
        "{:<8} {:>5} {:>6} {:>7} {:>8.0} {:>9.1} {:>10.1} {:>10.1} {:>7}µs {:>7}µs",
        cell.mode.name(),
        conns,
        cell.rate,
        cell.keys,
        r.achieved_rate,
        per(r.cpu_us),
        per(r.push_bytes as f64),
        per(r.net_out_bytes as f64),
        r.lag_p50_us,
        r.lag_p99_us
    );
}

/// How long the parent waits after the last write before reading a fleet of processes' cell.
const CHILD_DRAIN: Duration = Duration::from_secs(1);

/// Starts one process of a fleet: it tracks in the cell's mode, holds its keys, and says `ready`.
fn spawn_child(client: &redis::Client, cell: Cell, seed: u64) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let url = connection_url(client);
    let mut child = Command::new(exe)
        .args(["--child-of", &url, "--modes", cell.mode.name()])
        .args(["--keys", &cell.keys.to_string()])
        .args(["--held", &cell.held.to_string()])
        .args(["--seed", &seed.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start a fleet process: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    tokio::task::block_in_place(|| reader.read_line(&mut line)).map_err(|e| e.to_string())?;
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("a fleet process said {line:?} instead of ready"));
    }
    child.stdout = Some(reader.into_inner());
    Ok(child)
}

fn connection_url(client: &redis::Client) -> String {
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port) => format!("redis://{host}:{port}/"),
        other => format!("redis://{other}/"),
    }
}

/// Tells a fleet process to stop, and reads what it saw.
fn stop_child(mut child: Child) -> Result<Seen, String> {
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let _ = writeln!(stdin, "stop");
    drop(stdin);
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut seen = Seen::default();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| e.to_string())?;
        let mut words = line.split_whitespace();
        let tag = words.next();
        let f: Vec<u64> = words.filter_map(|v| v.parse().ok()).collect();
        match (tag, f.as_slice()) {
            (Some("a"), &[id, at]) => seen.arrivals.push((id as u32, at)),
            (Some("seen"), &[pushes, bytes, refills]) => {
                (seen.pushes, seen.push_bytes, seen.refills) = (pushes, bytes, refills);
            }
            _ => {}
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("a fleet process ended with {status}"));
    }
    Ok(seen)
}

/// One process of a fleet: one tracking connection holding its keys, until the parent says
/// `stop` on stdin; then what it saw, on stdout.
async fn child(url: String, args: Args) -> Result<(), String> {
    let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
    let mode = args.modes.first().copied().unwrap_or(Mode::Bcast);
    let keys = args.keys.first().copied().unwrap_or(1000);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let held: HashSet<u32> = sample(&mut rng, keys as usize, args.held.min(keys) as usize)
        .into_iter()
        .map(|i| i as u32)
        .collect();
    let arrived = Arc::new(AtomicU64::new(0));
    let conn = tracking_connection(&client, mode, &held, arrived)
        .await
        .map_err(|e| e.to_string())?;
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(receive(conn, held, stop));
    println!("ready");
    let _ = std::io::stdout().flush();
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    })
    .await
    .map_err(|e| e.to_string())?;
    stop_tx.send_replace(true);
    let seen = task.await.map_err(|e| e.to_string())?;
    let mut out = String::new();
    for (id, at) in &seen.arrivals {
        let _ = writeln!(out, "a {id} {at}");
    }
    let _ = writeln!(
        out,
        "seen {} {} {}",
        seen.pushes, seen.push_bytes, seen.refills
    );
    std::io::stdout()
        .write_all(out.as_bytes())
        .map_err(|e| e.to_string())
}
