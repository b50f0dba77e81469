//! One cell of the bench: a configuration (mode, connections or processes, rate, key set), and
//! what measuring it read from Valkey and from the tracking connections.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use echostore_testkit::info;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use redis::aio::MultiplexedConnection;
use tokio::sync::watch;

use crate::fleet::{CHILD_DRAIN, spawn_child, stop_child};
use crate::tracking::{self, key};
use crate::writes::{lags, write_paced};
use crate::{Args, Mode, patient};

/// How long pushes may keep arriving after the last write before the cell is read: a backlog at
/// the receiving side (this process shares the machine with the server) drains within it.
const DRAIN_QUIET: Duration = Duration::from_millis(250);

/// The longest the drain waits, however many pushes still arrive.
const DRAIN_MAX: Duration = Duration::from_secs(10);

/// One measured configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cell {
    pub(crate) mode: Mode,
    pub(crate) conns: usize,
    /// 1: the connections are this process's; more: each is a process of its own.
    pub(crate) procs: usize,
    pub(crate) rate: u32,
    pub(crate) keys: u32,
    pub(crate) held: u32,
}

/// What one cell measured.
#[derive(Debug, Default)]
pub(crate) struct Row {
    pub(crate) writes: u64,
    pub(crate) achieved_rate: f64,
    /// Push messages received, over all connections.
    pub(crate) pushes: u64,
    /// Keys named in them (a BCAST push carries every key written in one event-loop turn).
    pub(crate) push_keys: u64,
    /// Their RESP3 bytes, as Valkey encodes them.
    pub(crate) push_bytes: u64,
    /// Refill reads the tracking connections made.
    pub(crate) refills: u64,
    pub(crate) cpu_us: f64,
    pub(crate) net_out_bytes: u64,
    pub(crate) set_calls: u64,
    pub(crate) set_usec: u64,
    pub(crate) get_calls: u64,
    pub(crate) get_usec: u64,
    pub(crate) lag_p50_us: u64,
    pub(crate) lag_p99_us: u64,
    pub(crate) lag_max_us: u64,
    /// Pushes whose write could not be found (should be 0).
    pub(crate) unmatched: u64,
}

impl Row {
    /// `x` per write.
    pub(crate) fn per_write(&self, x: f64) -> f64 {
        x / self.writes.max(1) as f64
    }
}

pub(crate) async fn measure(
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
        let conn = tracking::connect(client, cell.mode, &held, arrived.clone())
            .await
            .map_err(err)?;
        tasks.push(tokio::spawn(tracking::receive(conn, held, stop.clone())));
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
