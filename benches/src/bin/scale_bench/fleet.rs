//! The small fleets of separate OS processes: the bench re-runs itself with a hidden
//! `--child-of <url>`; each child holds one tracking connection until the parent says `stop` on
//! its stdin, then reports what it saw on its stdout.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use tokio::sync::watch;

use crate::cell::Cell;
use crate::tracking::{self, Seen};
use crate::{Args, Mode};

/// How long the parent waits after the last write before reading a fleet of processes' cell.
pub(crate) const CHILD_DRAIN: Duration = Duration::from_secs(1);

/// Starts one process of a fleet: it tracks in the cell's mode, holds its keys, and says `ready`.
pub(crate) fn spawn_child(client: &redis::Client, cell: Cell, seed: u64) -> Result<Child, String> {
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
pub(crate) fn stop_child(mut child: Child) -> Result<Seen, String> {
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
pub(crate) async fn child(url: String, args: Args) -> Result<(), String> {
    let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
    let mode = args.modes.first().copied().unwrap_or(Mode::Bcast);
    let keys = args.keys.first().copied().unwrap_or(1000);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let held: HashSet<u32> = sample(&mut rng, keys as usize, args.held.min(keys) as usize)
        .into_iter()
        .map(|i| i as u32)
        .collect();
    let arrived = Arc::new(AtomicU64::new(0));
    let conn = tracking::connect(&client, mode, &held, arrived)
        .await
        .map_err(|e| e.to_string())?;
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(tracking::receive(conn, held, stop));
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
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let err = |e: std::io::Error| e.to_string();
    for (id, at) in &seen.arrivals {
        writeln!(out, "a {id} {at}").map_err(err)?;
    }
    let (pushes, bytes, refills) = (seen.pushes, seen.push_bytes, seen.refills);
    writeln!(out, "seen {pushes} {bytes} {refills}").map_err(err)?;
    out.flush().map_err(err)
}
