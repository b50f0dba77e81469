//! The writer of a cell, paced on 1 ms ticks, and the coherence lag: each push matched to the
//! write it announces.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hdrhistogram::Histogram;
use rand::Rng;
use rand::rngs::StdRng;
use redis::aio::MultiplexedConnection;

use crate::cell::{Cell, Row};

use crate::tracking::{Seen, key};

/// Writes in flight at once on the writer's connection; beyond it the writer falls behind its
/// rate, and the achieved rate says so.
const MAX_IN_FLIGHT: usize = 512;

/// One write: its key, when it was sent and when its reply came (ns since the epoch).
pub(crate) type Write = (u32, u64, u64);

/// The wall clock in ns: the one clock this process and its fleet's processes share.
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Sets uniformly chosen keys at `cell.rate` for `seconds`, pipelined on one connection; returns
/// each write in the order sent.
pub(crate) async fn write_paced(
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

/// Matches each arrival to the write it announces (the last write of its key sent before it
/// arrived) and fills the lag percentiles and the push counts. A push that arrives before this
/// process has read the write's reply (both leave the server in one event-loop turn) counts as
/// zero lag.
pub(crate) fn lags(writes: &[Write], seen: &[Seen], row: &mut Row) {
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
